//! `sluice`: the command-line entry point.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod ctl;
mod demo;
mod run;
mod testbed;

/// Sluice runs network-function chains: firewall, NAT, load balancer, IPS and flow
/// monitor, with their per-flow state behind a store API.
#[derive(Parser)]
#[command(name = "sluice", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Process a pcap/pcapng trace through a chain offline.
    Run(run::RunArgs),
    /// Generate the sample chain and trace, run them, and print the summary.
    Demo {
        /// Directory for the generated files.
        #[arg(long, default_value = "out/demo")]
        out: PathBuf,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run benchmarks (results are ratios to a baseline measured in the same run).
    Bench {
        #[command(subcommand)]
        which: BenchCmd,
    },
    /// Validate a tenant specification (YAML) without applying it.
    Check {
        /// The spec.
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
    /// Write the sample trace (and its chain and rule files) without running it.
    Sample {
        /// Directory for the generated files.
        #[arg(long, default_value = "out/demo")]
        out: PathBuf,
    },
    /// Run the controller (REST API, desired state in SQLite) until SIGINT/SIGTERM.
    Controller(ctl::ControllerArgs),
    /// Apply a tenant specification through the controller.
    Apply(ctl::ApplyArgs),
    /// Show what the controller holds: tenants, hosts, VMs, instances, chains, FIBs.
    Get(ctl::GetArgs),
    /// Delete a tenant (or a VM registration) through the controller.
    Delete(ctl::DeleteArgs),
    /// Hosts alive and in sync, tenants, NF instances alive.
    Status(ctl::StatusArgs),
    /// Scale a middlebox of a tenant to N instances through the controller.
    Scale(ctl::ScaleArgs),
    /// Failovers, rejoins, drains and scaling decisions the controller logged.
    Events(ctl::EventsArgs),
    /// Report an application metric sample of a chain (feeds its scaler).
    Metric(ctl::MetricArgs),
    /// Experiments on a testbed (needs root): `failover` is StatelessNF Fig. 4.7,
    /// `elasticity` Fig. 4.8.
    Experiment {
        #[command(subcommand)]
        what: ExperimentCmd,
    },
    /// A whole deployment on this machine: hosts and VMs as network namespaces,
    /// Redis, the controller and one agent per host (needs root).
    Testbed {
        #[command(subcommand)]
        what: TestbedCmd,
    },
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Single-core throughput of each function and of a chain, 64-byte and full-size packets.
    Nf {
        /// Print one JSON object per measurement instead of a table.
        #[arg(long)]
        json: bool,
        /// Packets per run of the small-packet traffic.
        #[arg(long, default_value_t = 1_000_000)]
        packets: usize,
        /// Frame size of the small-packet traffic.
        #[arg(long, default_value_t = 64)]
        frame_size: usize,
        /// Packets per flow (handshake and teardown included).
        #[arg(long, default_value_t = 1000)]
        flow_length: usize,
        /// Flows active at once.
        #[arg(long, default_value_t = 256)]
        concurrency: usize,
        /// StatelessNF §4.6.2.2's mixes: `long` (10,000-packet flows) or `short`
        /// (100-packet flows); overrides --flow-length.
        #[arg(long)]
        mix: Option<Mix>,
        /// Runs per measurement; the best is kept.
        #[arg(long, default_value_t = 3)]
        reps: usize,
        /// Only measurements whose name contains this.
        #[arg(long)]
        filter: Option<String>,
    },
    /// Control plane: time to compile the Stratos Figure 4 tenant into FIB entries and
    /// to install them (Stratos Table 1).
    Control {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Runs; the median and the slowest are reported.
        #[arg(long, default_value_t = 50)]
        runs: usize,
    },
    /// The distributed switch against a direct veth link (iperf3 throughput, TCP
    /// round trips) and apply-to-installed time on every agent, on a namespace
    /// testbed (needs root; Stratos §7.1.1 and Table 1).
    Dataplane {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Seconds per iperf3 run.
        #[arg(long, default_value_t = 5)]
        seconds: u32,
        /// Re-applications of the tenant timed for the install measurement.
        #[arg(long, default_value_t = 10)]
        installs: usize,
        /// The tenant the testbed runs (its web-a1 and web-b1 VMs carry the traffic).
        #[arg(long, default_value = "examples/tenant/figure4.yaml")]
        spec: PathBuf,
        /// Run the agents with Seawall's rate control (what it costs the
        /// switch path when nothing is congested).
        #[arg(long)]
        seawall: bool,
    },
    /// Remote (Redis) versus local state: throughput, added latency and store
    /// operations per packet of each function, long and short flows (StatelessNF Fig. 4.4).
    State {
        /// Print one JSON object per measurement instead of tables.
        #[arg(long)]
        json: bool,
        /// Fewer frame sizes and packets, for a fast run.
        #[arg(long)]
        quick: bool,
        /// Existing store to measure (`redis://HOST:PORT` or
        /// `redis-cluster://HOST:PORT,...`); default: a private redis-server on loopback.
        #[arg(long)]
        state: Option<String>,
        /// Only measurements whose name (e.g. `firewall_long_64`) contains this.
        #[arg(long)]
        filter: Option<String>,
        /// Rounds per workload, each running every backend once in turn; the
        /// fastest run of each is kept.
        #[arg(long, default_value_t = 3)]
        reps: usize,
        /// Packets per window of the pipelined runs, in whole batches
        /// (docs/STATE.md, "Pipelining"); 0 skips them.
        #[arg(long, default_value_t = sluice_bench::state::DEFAULT_WINDOW)]
        window: usize,
    },
    /// One NF instance's data path (Geneve in, chain, Geneve out) on short
    /// flows: local state versus Redis behind the flow cache, plain and
    /// pipelined (a middlebox's `pipeline:`).
    Instance {
        /// Print one JSON object per function instead of a table.
        #[arg(long)]
        json: bool,
        /// Existing store to measure (`redis://HOST:PORT` or
        /// `redis-cluster://HOST:PORT,...`); default: a private redis-server on loopback.
        #[arg(long)]
        state: Option<String>,
        /// Only functions whose name contains this.
        #[arg(long)]
        filter: Option<String>,
        /// Packets per run (short flows of 100 packets, 64-byte frames).
        #[arg(long, default_value_t = 200_000)]
        packets: usize,
        /// Packets per pipelined window.
        #[arg(long, default_value_t = 512)]
        window: usize,
        /// Runs per mode; the fastest is kept.
        #[arg(long, default_value_t = 2)]
        reps: usize,
    },
}

#[derive(Subcommand)]
enum TestbedCmd {
    /// Bring a testbed up with a tenant applied, and leave it running.
    Up {
        /// Tenant spec to apply (its services become VMs, its external subnets a gateway).
        #[arg(long, default_value = "examples/tenant/figure4.yaml")]
        spec: PathBuf,
        /// Hosts.
        #[arg(long, default_value_t = 3)]
        hosts: u32,
        /// Working directory (logs, the controller's database, testbed.json).
        #[arg(long, default_value = testbed::DEFAULT_DIR)]
        dir: PathBuf,
        /// Do not start nginx in the service VMs.
        #[arg(long)]
        no_web: bool,
        /// Run the agents with Seawall's rate control (VM-level fair sharing
        /// of congested paths; docs/ISOLATION.md).
        #[arg(long)]
        seawall: bool,
    },
    /// Stop and remove the testbed recorded in DIR.
    Down {
        /// Working directory given to `up`.
        #[arg(long, default_value = testbed::DEFAULT_DIR)]
        dir: PathBuf,
    },
    /// Up, real HTTP traffic through the Figure 4 chains with a check of each
    /// behaviour, a report, and down.
    Demo {
        /// Tenant spec (the checks expect examples/tenant/figure4.yaml's shape).
        #[arg(long, default_value = "examples/tenant/figure4.yaml")]
        spec: PathBuf,
        /// Hosts.
        #[arg(long, default_value_t = 3)]
        hosts: u32,
        /// Working directory.
        #[arg(long, default_value = testbed::DEFAULT_DIR)]
        dir: PathBuf,
        /// The firewall's `state:` (shared, cached or local); `spec` to keep
        /// the spec's own. The default, cached, shows the ownership leases and
        /// the flow cache at work (docs/STATE.md).
        #[arg(long, default_value = "cached")]
        fw_state: String,
    },
}

#[derive(Subcommand)]
enum ExperimentCmd {
    /// Seawall: a VM's TCP download against a VM flooding UDP or opening many
    /// TCP connections, over a congested link into one host, with the agents'
    /// rate control off and then on (Seawall §3.1, Fig. 1-2; docs/ISOLATION.md).
    Isolation {
        /// Tenant spec (needs VMs web-a1, web-a2 and web-b1 on three hosts).
        #[arg(long, default_value = "examples/tenant/figure4.yaml")]
        spec: PathBuf,
        /// Rate of the link into the receiving host, Mbit/s.
        #[arg(long, default_value_t = 100)]
        bottleneck_mbit: u32,
        /// Queue of that link, KiB.
        #[arg(long, default_value_t = 128)]
        queue_kb: u32,
        /// The UDP aggressor's rate, Mbit/s.
        #[arg(long, default_value_t = 300)]
        udp_mbit: u32,
        /// The TCP aggressor's connections.
        #[arg(long, default_value_t = 16)]
        tcp_flows: usize,
        /// Seconds per contest.
        #[arg(long, default_value_t = 6)]
        seconds: u32,
        /// Seawall weight of the victim VM (1 to 1000; the aggressor weighs 1).
        #[arg(long, default_value_t = 1)]
        victim_weight: u16,
        /// Settings to compare: off, on, or both (off,on).
        #[arg(long, default_value = "off,on")]
        seawall: String,
        /// Working directory.
        #[arg(long, default_value = "/tmp/sluice-experiment")]
        dir: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Concurrent HTTP downloads through a middlebox; SIGKILL one instance
    /// mid-transfer; compare with a run without failure (StatelessNF Fig. 4.7).
    Failover {
        /// Tenant spec (`state: local` on the middlebox gives the baseline).
        #[arg(long, default_value = "examples/experiments/failover.yaml")]
        spec: PathBuf,
        /// Concurrent downloads.
        #[arg(long, default_value_t = 100)]
        downloads: usize,
        /// Size of each download, KiB.
        #[arg(long, default_value_t = 2048)]
        size_kib: usize,
        /// Rate limit per download (curl --limit-rate).
        #[arg(long, default_value = "256k")]
        rate: String,
        /// Kill this long after the downloads start, ms.
        #[arg(long, default_value_t = 3000)]
        kill_after_ms: u64,
        /// The middlebox whose first instance is killed.
        #[arg(long, default_value = "fw")]
        middlebox: String,
        /// Working directory.
        #[arg(long, default_value = "/tmp/sluice-experiment")]
        dir: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Open-loop HTTP requests through capacity-limited middleboxes at a rate
    /// that ramps up, holds and drops; the chain's scaler (greedy, none, all)
    /// adds and removes instances (Stratos Table 2, Fig. 11).
    Scaling {
        /// Tenant spec.
        #[arg(long, default_value = "examples/experiments/scaling.yaml")]
        spec: PathBuf,
        /// Strategies to compare, comma-separated.
        #[arg(long, default_value = "greedy,none,all")]
        strategies: String,
        /// Request rate at the start, requests/s.
        #[arg(long, default_value_t = 20.0)]
        rate_start: f64,
        /// Request rate at the peak.
        #[arg(long, default_value_t = 100.0)]
        rate_peak: f64,
        /// Request rate after the peak.
        #[arg(long, default_value_t = 50.0)]
        rate_after: f64,
        /// Seconds of ramp, peak and after.
        #[arg(long, default_value = "30,100,60")]
        phases: String,
        /// Scaler trial window, ms.
        #[arg(long, default_value_t = 5000)]
        window_ms: u64,
        /// Fraction of each trial window the scaler ignores while the queue of
        /// the previous trial drains.
        #[arg(long, default_value_t = 0.5)]
        settle: f64,
        /// What the scaler follows: `reported` (the client's mean response
        /// time, POSTed every second) or `handshake_ms` (the TCP handshake time
        /// the agents measure through the chain; the client reports nothing).
        #[arg(long, default_value = "reported")]
        metric: String,
        /// The metric's target, ms: the scaler stops adding instances once it
        /// is met (default: 100 for the response time, 10 for the handshake
        /// time, which only waits in the middleboxes' queues).
        #[arg(long)]
        target_ms: Option<f64>,
        /// Working directory.
        #[arg(long, default_value = "/tmp/sluice-experiment")]
        dir: PathBuf,
        /// Where the CSV and JSON go.
        #[arg(long, default_value = "out/experiments/scaling")]
        out: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Ramp long downloads up and down through a middlebox; scale it out at the
    /// peak and back in on the way down, once per variant of its state and
    /// affinity (StatelessNF Fig. 4.8). Writes CSV, SVG and JSON to --out.
    Elasticity {
        /// Base tenant spec; each variant sets the middlebox's state and affinity.
        #[arg(long, default_value = "examples/experiments/elasticity.yaml")]
        spec: PathBuf,
        /// Variants, `state/affinity` (shared|cached|local / hash|pinned),
        /// comma-separated.
        #[arg(
            long,
            default_value = "shared/hash,cached/hash,local/hash,local/pinned"
        )]
        variants: String,
        /// Groups of downloads (ramp steps).
        #[arg(long, default_value_t = 5)]
        steps: usize,
        /// Downloads per group.
        #[arg(long, default_value_t = 4)]
        flows_per_step: usize,
        /// Time between groups, ms.
        #[arg(long, default_value_t = 2000)]
        step_ms: u64,
        /// Steps at the peak.
        #[arg(long, default_value_t = 2)]
        hold_steps: usize,
        /// Rate of each download, KiB/s.
        #[arg(long, default_value_t = 1024)]
        rate_kib: u64,
        /// Per-instance capacity of the middlebox, Mbit/s (none by default).
        #[arg(long)]
        capacity_mbps: Option<f64>,
        /// The middlebox scaled.
        #[arg(long, default_value = "fw")]
        middlebox: String,
        /// Scale out half a step after this group (0-based) started, not at
        /// the peak: later groups then start after the scale-out.
        #[arg(long)]
        scale_out_after: Option<usize>,
        /// Working directory.
        #[arg(long, default_value = "/tmp/sluice-experiment")]
        dir: PathBuf,
        /// Where the CSV, SVG and JSON go.
        #[arg(long, default_value = "out/experiments/elasticity")]
        out: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// StatelessNF's traffic mixes.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Mix {
    /// Few long flows (10,000 packets each).
    Long,
    /// Many short flows (100 packets each).
    Short,
}

fn bench(which: BenchCmd) -> Result<(), String> {
    match which {
        BenchCmd::Dataplane {
            json,
            seconds,
            installs,
            spec,
            seawall,
        } => {
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            let r = sluice_bench::dataplane::run(&exe, &spec, seconds, installs, seawall)?;
            if json {
                println!("{}", serde_json::to_string(&r).map_err(|e| e.to_string())?);
            } else {
                sluice_bench::dataplane::print(&r);
            }
            Ok(())
        }
        BenchCmd::Control { json, runs } => {
            let ts = sluice_bench::control::run(runs)?;
            for t in &ts {
                if json {
                    println!("{}", serde_json::to_string(t).expect("timing serialises"));
                } else {
                    println!(
                        "{:<30} median {:>7.3} ms  max {:>7.3} ms  goal <= {} ms  Stratos {} ms  ({} entries)",
                        t.name, t.median_ms, t.max_ms, t.goal_ms, t.stratos_ms, t.entries
                    );
                }
            }
            Ok(())
        }
        BenchCmd::Nf {
            json,
            packets,
            frame_size,
            flow_length,
            concurrency,
            mix,
            reps,
            filter,
        } => {
            let flow_length = match mix {
                Some(Mix::Long) => 10_000,
                Some(Mix::Short) => 100,
                None => flow_length,
            };
            let opts = sluice_bench::nf::Options {
                packets,
                frame_size,
                flow_length,
                concurrency,
                reps,
                filter,
            };
            let ms = sluice_bench::nf::run(&opts, &mut |what| eprintln!("bench: {what}"));
            if ms.is_empty() {
                return Err("no measurement ran (check --filter)".into());
            }
            if json {
                for m in &ms {
                    println!(
                        "{}",
                        serde_json::to_string(m).expect("measurement serialises")
                    );
                }
            } else {
                print!("{}", sluice_bench::table(&ms));
            }
            Ok(())
        }
        BenchCmd::State {
            json,
            quick,
            state,
            filter,
            reps,
            window,
        } => {
            let opts = sluice_bench::state::Options {
                quick,
                state,
                filter,
                reps,
                window,
            };
            let ms = sluice_bench::state::run(&opts, &mut |what| eprintln!("bench: {what}"))?;
            print_measurements(&ms, json, sluice_bench::state::table)
        }
        BenchCmd::Instance {
            json,
            state,
            filter,
            packets,
            window,
            reps,
        } => {
            if window == 0 {
                return Err("--window: give a pipelined window of at least 1 packet".into());
            }
            let opts = sluice_bench::instance::Options {
                state,
                filter,
                packets,
                window,
                reps,
            };
            let ms = sluice_bench::instance::run(&opts, &mut |what| eprintln!("bench: {what}"))?;
            print_measurements(&ms, json, sluice_bench::instance::table)
        }
    }
}

/// Prints benchmark results: one JSON object per line with `json`, else the
/// table `table` makes of them; none at all is an error.
fn print_measurements<M: serde::Serialize>(
    ms: &[M],
    json: bool,
    table: fn(&[M]) -> String,
) -> Result<(), String> {
    if ms.is_empty() {
        return Err("no measurement ran (check --filter)".into());
    }
    if json {
        for m in ms {
            println!(
                "{}",
                serde_json::to_string(m).expect("measurement serialises")
            );
        }
    } else {
        print!("{}", table(ms));
    }
    Ok(())
}

/// `sluice check -f SPEC`: parse and validate a tenant spec, print what it holds.
fn check(file: &std::path::Path) -> Result<(), String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let name = file.display().to_string();
    let spec = sluice_tenant::TenantSpec::parse(&text, &name, Some(&sluice_builtin::registry()))
        .map_err(|e| e.to_string())?;
    println!(
        "{name}: tenant `{}` is valid: {} elements, {} chains",
        spec.tenant,
        spec.elements.len(),
        spec.chains.len()
    );
    for c in &spec.chains {
        println!(
            "  chain {:<16} {}{}{}",
            c.name,
            c.path.join(" -> "),
            if c.bidirectional {
                " (bidirectional)"
            } else {
                ""
            },
            if c.mirror.is_empty() {
                String::new()
            } else {
                format!(", mirrored to {}", c.mirror.join(", "))
            }
        );
    }
    Ok(())
}

/// Prints an error and turns it into a failing exit code.
fn exit(r: Result<(), String>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Run(args) => run::main(&args),
        Cmd::Demo { out, json } => demo::demo(&out, json),
        Cmd::Sample { out } => demo::write_sample(&out).map(|_| ()),
        Cmd::Controller(a) => return exit(ctl::controller(&a)),
        Cmd::Apply(a) => return exit(ctl::apply(&a)),
        Cmd::Get(a) => return exit(ctl::get(&a)),
        Cmd::Delete(a) => return exit(ctl::delete(&a)),
        Cmd::Status(a) => return exit(ctl::status(&a)),
        Cmd::Scale(a) => return exit(ctl::scale(&a)),
        Cmd::Events(a) => return exit(ctl::events(&a)),
        Cmd::Metric(a) => return exit(ctl::metric(&a)),
        Cmd::Experiment { what } => {
            return exit(match what {
                ExperimentCmd::Isolation {
                    spec,
                    bottleneck_mbit,
                    queue_kb,
                    udp_mbit,
                    tcp_flows,
                    seconds,
                    victim_weight,
                    seawall,
                    dir,
                    json,
                } => testbed::isolation(
                    &spec,
                    &dir,
                    &seawall,
                    sluice_testbed::isolation::IsolationOptions {
                        bottleneck_mbit,
                        queue_kb,
                        udp_mbit,
                        tcp_flows,
                        seconds,
                        victim_weight,
                    },
                    json,
                ),
                ExperimentCmd::Failover {
                    spec,
                    downloads,
                    size_kib,
                    rate,
                    kill_after_ms,
                    middlebox,
                    dir,
                    json,
                } => testbed::failover(
                    &spec,
                    &dir,
                    &sluice_testbed::experiments::FailoverOptions {
                        downloads,
                        size: size_kib * 1024,
                        rate,
                        kill_after: std::time::Duration::from_millis(kill_after_ms),
                        middlebox,
                        client: "198.51.100.10".into(),
                        server: "srv1".into(),
                    },
                    json,
                ),
                ExperimentCmd::Scaling {
                    spec,
                    strategies,
                    rate_start,
                    rate_peak,
                    rate_after,
                    phases,
                    window_ms,
                    settle,
                    metric,
                    target_ms,
                    dir,
                    out,
                    json,
                } => testbed::scaling(
                    &spec,
                    &strategies,
                    &phases,
                    &dir,
                    &out,
                    sluice_testbed::scaling::ScalingOptions {
                        rate_start,
                        rate_peak,
                        rate_after,
                        window_ms,
                        settle,
                        target_ms: target_ms.unwrap_or(if metric == "reported" {
                            100.0
                        } else {
                            10.0
                        }),
                        metric,
                        ..Default::default()
                    },
                    json,
                ),
                ExperimentCmd::Elasticity {
                    spec,
                    variants,
                    steps,
                    flows_per_step,
                    step_ms,
                    hold_steps,
                    rate_kib,
                    capacity_mbps,
                    middlebox,
                    scale_out_after,
                    dir,
                    out,
                    json,
                } => testbed::elasticity(
                    &spec,
                    &variants,
                    capacity_mbps,
                    &dir,
                    &out,
                    &sluice_testbed::elasticity::ElasticityOptions {
                        steps,
                        flows_per_step,
                        step: std::time::Duration::from_millis(step_ms),
                        hold_steps,
                        rate_kib,
                        middlebox,
                        scale_out_after,
                        ..Default::default()
                    },
                    json,
                ),
            })
        }
        Cmd::Testbed { what } => {
            return exit(match what {
                TestbedCmd::Up {
                    spec,
                    hosts,
                    dir,
                    no_web,
                    seawall,
                } => testbed::up(&spec, hosts, &dir, !no_web, seawall),
                TestbedCmd::Down { dir } => testbed::down(&dir),
                TestbedCmd::Demo {
                    spec,
                    hosts,
                    dir,
                    fw_state,
                } => testbed::demo(
                    &spec,
                    hosts,
                    &dir,
                    (fw_state != "spec").then_some(fw_state.as_str()),
                ),
            })
        }
        Cmd::Check { file } => {
            return match check(&file) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::Bench { which } => {
            return match bench(which) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
