//! `sluice bench nf | control | dataplane | state | instance | fleet`: the benchmarks, each
//! printing ratios against a baseline measured in the same run.

use std::path::PathBuf;

use clap::Subcommand;

use crate::error::CliError;

/// The benchmark to run.
#[derive(Subcommand)]
pub enum BenchCmd {
    /// Single-core throughput of each function and of a chain, 64-byte and
    /// full-size packets; with `--threads`, its scaling over worker threads.
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
        /// Instead of the single-core suite, forward on each of these worker
        /// counts (e.g. `1,2`), flows sharded by the direction-invariant hash,
        /// each worker with its own chain and state; ratios against the first.
        #[arg(long, value_delimiter = ',')]
        threads: Vec<usize>,
        /// Rule files (Suricata syntax, e.g. ET Open's `*.rules`) for the
        /// `ips_rulefiles_http` row: the IPS with them loaded on an HTTP
        /// browsing mix, against the IPS with 100 generated rules on it.
        #[arg(long, value_name = "FILE", num_args = 1..)]
        ips_rules: Vec<PathBuf>,
        /// Also run Suricata over the same HTTP mix (written to a pcap) with
        /// the same rule files: the `suricata_rulefiles_http` row, its ratio
        /// against `ips_rulefiles_http`. A directory made by
        /// `scripts/suricata-reference.sh`, or a suricata executable.
        #[arg(long, value_name = "PATH", requires = "ips_rules")]
        suricata: Option<PathBuf>,
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
        /// Instead of the testbed, the agents' forwarding core in process on
        /// each of these thread counts (e.g. `1,2`), flows sharded by the
        /// direction-invariant hash, each thread with its own data planes;
        /// ratios against the first (no root needed).
        #[arg(long, value_delimiter = ',')]
        threads: Vec<usize>,
        /// Instead of the whole benchmark, the switch path on a testbed whose
        /// agents run each of these numbers of forwarding threads in turn
        /// (e.g. `1,2`: `dataplane_threads`), iperf3 with `--streams`
        /// connections; ratios against the first (needs root).
        #[arg(long, value_delimiter = ',')]
        dataplane_threads: Vec<usize>,
        /// Parallel TCP connections of each iperf3 run with
        /// `--dataplane-threads` (one flow stays on one thread).
        #[arg(long, default_value_t = 8)]
        streams: usize,
    },
    /// CoMb's consolidation in the running system: the Figure 4 tenant on a
    /// namespace testbed with its firewall and IPS separate, then
    /// consolidated into one group, the same downloads through each; CPU of
    /// the instances and agents per GB delivered and throughput, ratios
    /// against the separate arm (needs root).
    Consolidation {
        /// Print one JSON object per arm.
        #[arg(long)]
        json: bool,
        /// 1 MiB downloads per arm, one after another.
        #[arg(long, default_value_t = 40)]
        downloads: usize,
        /// The Figure 4 spec both arms derive from.
        #[arg(long, default_value = "examples/tenant/figure4.yaml")]
        spec: PathBuf,
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
    /// A replicated state store (Redis Cluster, a replica per primary): what
    /// waiting for replicas costs each function against no replicas, and what
    /// a primary's death loses with and without waiting (docs/STATE.md,
    /// "Replication").
    Replication {
        /// Print one JSON object per row instead of tables.
        #[arg(long)]
        json: bool,
        /// Fewer packets, for a fast run.
        #[arg(long)]
        quick: bool,
        /// Rounds per function, each running every store once in turn; the
        /// fastest run of each is kept.
        #[arg(long, default_value_t = 3)]
        reps: usize,
    },
    /// The real controller (in process) against simulated agents: host
    /// registration rate, tenant apply latency, pushes and bytes per tenant,
    /// time until every agent is in sync, memory (issue 25).
    Fleet {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Simulated hosts.
        #[arg(long, default_value_t = 100)]
        hosts: u32,
        /// Tenants applied (each: 2-5 VMs on as many hosts and a firewall).
        #[arg(long, default_value_t = 200)]
        tenants: u32,
        /// A fixed heartbeat interval for every agent, milliseconds, whatever
        /// the controller tells (agents before issue 25: 50); default: the
        /// interval the controller tells, as the real agent.
        #[arg(long)]
        heartbeat_ms: Option<u64>,
        /// Seal the fabric: every configuration carries keys for its peers.
        #[arg(long)]
        fabric_auth: bool,
    },
}

/// StatelessNF's traffic mixes.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Mix {
    /// Few long flows (10,000 packets each).
    Long,
    /// Many short flows (100 packets each).
    Short,
}

/// Runs one benchmark and prints its results.
pub fn run(which: BenchCmd) -> Result<(), CliError> {
    match which {
        BenchCmd::Dataplane {
            json,
            seconds,
            installs,
            spec,
            seawall,
            threads,
            dataplane_threads,
            streams,
        } => {
            if !dataplane_threads.is_empty() {
                let mut progress = |what: &str| eprintln!("bench: {what}");
                let exe = std::env::current_exe().map_err(CliError::OwnBinary)?;
                let rows = sluice_bench::dataplane::threads_run(
                    &exe,
                    &spec,
                    seconds,
                    &dataplane_threads,
                    streams,
                    &mut progress,
                )
                .map_err(CliError::Bench)?;
                if json {
                    for r in &rows {
                        outln!("{}", serde_json::to_string(r).expect("row serialises"))?;
                    }
                } else {
                    sluice_bench::dataplane::print_threads(&rows);
                }
                return Ok(());
            }
            if !threads.is_empty() {
                let mut progress = |what: &str| eprintln!("bench: {what}");
                let rows =
                    sluice_bench::shards::run(&threads, &mut progress).map_err(CliError::Bench)?;
                if json {
                    for r in &rows {
                        outln!("{}", serde_json::to_string(r).expect("row serialises"))?;
                    }
                } else {
                    sluice_bench::shards::print(&rows);
                }
                return Ok(());
            }
            let exe = std::env::current_exe().map_err(CliError::OwnBinary)?;
            let r = sluice_bench::dataplane::run(&exe, &spec, seconds, installs, seawall)
                .map_err(CliError::Bench)?;
            if json {
                outln!("{}", serde_json::to_string(&r).expect("report serialises"))?;
            } else {
                sluice_bench::dataplane::print(&r);
            }
            Ok(())
        }
        BenchCmd::Consolidation {
            json,
            downloads,
            spec,
        } => {
            let mut progress = |what: &str| eprintln!("bench: {what}");
            let exe = std::env::current_exe().map_err(CliError::OwnBinary)?;
            let rows = sluice_bench::consolidation::run(&exe, &spec, downloads, &mut progress)
                .map_err(CliError::Bench)?;
            if json {
                for r in &rows {
                    outln!("{}", serde_json::to_string(r).expect("row serialises"))?;
                }
            } else {
                sluice_bench::consolidation::print(&rows);
            }
            Ok(())
        }
        BenchCmd::Control { json, runs } => {
            let ts = sluice_bench::control::run(runs).map_err(CliError::Bench)?;
            for t in &ts {
                if json {
                    outln!("{}", serde_json::to_string(t).expect("timing serialises"))?;
                } else {
                    outln!(
                        "{:<30} median {:>7.3} ms  max {:>7.3} ms  goal <= {} ms  Stratos {} ms  ({} entries)",
                        t.name, t.median_ms, t.max_ms, t.goal_ms, t.stratos_ms, t.entries
                    )?;
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
            threads,
            ips_rules,
            suricata,
        } => {
            if threads.contains(&0) {
                return Err(CliError::flag(
                    "threads",
                    "every worker count must be at least 1",
                ));
            }
            // Relative to the working directory, not the benchmark's own.
            let ips_rules = ips_rules
                .into_iter()
                .map(|f| std::path::absolute(&f).unwrap_or(f))
                .collect();
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
                ips_rules,
                suricata: suricata.map(|p| std::path::absolute(&p).unwrap_or(p)),
            };
            let mut progress = |what: &str| eprintln!("bench: {what}");
            let ms = if threads.is_empty() {
                sluice_bench::nf::run(&opts, &mut progress)
            } else {
                sluice_bench::nf::scaling(&opts, &threads, &mut progress)
            };
            if ms.is_empty() {
                return Err(CliError::NoMeasurement);
            }
            if json {
                for m in &ms {
                    outln!(
                        "{}",
                        serde_json::to_string(m).expect("measurement serialises")
                    )?;
                }
            } else {
                crate::output::text(&sluice_bench::table(&ms))?;
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
            let ms = sluice_bench::state::run(&opts, &mut |what| eprintln!("bench: {what}"))
                .map_err(CliError::Bench)?;
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
                return Err(CliError::flag(
                    "window",
                    "give a pipelined window of at least 1 packet",
                ));
            }
            let opts = sluice_bench::instance::Options {
                state,
                filter,
                packets,
                window,
                reps,
            };
            let ms = sluice_bench::instance::run(&opts, &mut |what| eprintln!("bench: {what}"))
                .map_err(CliError::Bench)?;
            print_measurements(&ms, json, sluice_bench::instance::table)
        }
        BenchCmd::Replication { json, quick, reps } => {
            use sluice_bench::replication;
            let dir = std::env::temp_dir()
                .join(format!("sluice-bench-replication-{}", std::process::id()));
            let mut progress = |what: &str| eprintln!("bench: {what}");
            let mut run = || -> Result<_, String> {
                let cost = replication::cost(&dir, quick, reps, &mut progress)?;
                let mut failovers = Vec::new();
                for (wait, kill) in [(0, false), (0, true), (1, true)] {
                    eprintln!("bench: failover: wait={wait}, kill={kill}");
                    failovers.push(replication::failover(&dir, wait, kill)?);
                }
                Ok((cost, failovers))
            };
            let result = run();
            let _ = std::fs::remove_dir_all(&dir);
            let (cost, failovers) = result.map_err(CliError::Bench)?;
            if json {
                for r in &cost {
                    outln!("{}", serde_json::to_string(r).unwrap_or_default())?;
                }
                for r in &failovers {
                    outln!("{}", serde_json::to_string(r).unwrap_or_default())?;
                }
            } else {
                crate::output::text(&replication::report(&cost, &failovers))?;
            }
            Ok(())
        }
        BenchCmd::Fleet {
            json,
            hosts,
            tenants,
            heartbeat_ms,
            fabric_auth,
        } => fleet(
            json,
            &sluice_bench::fleet::Options {
                hosts,
                tenants,
                heartbeat: heartbeat_ms.map(|ms| std::time::Duration::from_millis(ms.max(1))),
                fabric_auth,
                ..sluice_bench::fleet::Options::default()
            },
        ),
    }
}

/// Runs `sluice bench fleet` and prints its report.
fn fleet(json: bool, opts: &sluice_bench::fleet::Options) -> Result<(), CliError> {
    let out = sluice_bench::fleet::run(opts, &mut |what| eprintln!("bench: {what}"))
        .map_err(CliError::Bench)?;
    if json {
        outln!(
            "{}",
            serde_json::to_string(&out.report).expect("report serialises")
        )?;
    } else {
        crate::output::text(&sluice_bench::fleet::table(&out.report))?;
    }
    Ok(())
}

/// Prints benchmark results: one JSON object per line with `json`, else the
/// table `table` makes of them; none at all is an error.
fn print_measurements<M: serde::Serialize>(
    ms: &[M],
    json: bool,
    table: fn(&[M]) -> String,
) -> Result<(), CliError> {
    if ms.is_empty() {
        return Err(CliError::NoMeasurement);
    }
    if json {
        for m in ms {
            outln!(
                "{}",
                serde_json::to_string(m).expect("measurement serialises")
            )?;
        }
    } else {
        crate::output::text(&table(ms))?;
    }
    Ok(())
}
