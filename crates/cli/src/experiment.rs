//! `sluice experiment isolation | containment | placement | failover | scaling
//! | elasticity | chaos`: the papers' experiments, and issue 22's fault injection, on a
//! namespace testbed (needs root).

use std::path::{Path, PathBuf};

use clap::Subcommand;
use sluice_testbed::lab::Lab;

use crate::error::CliError;
use crate::testbed::{guard, options, options_with, print_state};

/// The experiment to run.
#[derive(Subcommand)]
pub enum ExperimentCmd {
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
    /// Issue 27 (Stratos §7.2): two racks of two hosts with limited uplinks,
    /// clients in one rack, servers in both, a chain of three middleboxes;
    /// least-loaded placement with uniform distribution against rack-aware
    /// placement with network-aware distribution, alternating, uplinks
    /// limited and free (docs/REPRODUCTION.md, "Placement on the testbed").
    Placement {
        /// Tenant spec (VMs c1, c2, w1, w2, w3; the chain's middleboxes).
        #[arg(long, default_value = "examples/experiments/placement.yaml")]
        spec: PathBuf,
        /// Each rack uplink's rate when limited, Mbit/s: below what the
        /// testbed serves (110-160 Mbit/s on a 2-core VM), so a limited
        /// uplink is the bottleneck.
        #[arg(long, default_value_t = 50)]
        uplink_mbit: u32,
        /// What the aware arm's controller is told a rack uplink carries
        /// when it is not limited, Mbit/s.
        #[arg(long, default_value_t = 10_000)]
        free_uplink_mbit: u32,
        /// The aware arm's controller's `uplink_target` (a fraction or a
        /// percentage) [default: the controller's].
        #[arg(long)]
        uplink_target: Option<String>,
        /// The aware arm's controller's `distribution_classes`: the flows to
        /// each rack's servers get a split of their own.
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        distribution_classes: bool,
        /// The uplinks' queues, KiB.
        #[arg(long, default_value_t = 256)]
        queue_kb: u32,
        /// Every agent's forwarding threads, in both arms (a deployed agent
        /// runs one per core).
        #[arg(long, default_value_t = 2)]
        dataplane_threads: u32,
        /// Seconds of load before each measured window.
        #[arg(long, default_value_t = 20)]
        warmup: u32,
        /// Seconds measured per window.
        #[arg(long, default_value_t = 15)]
        seconds: u32,
        /// Rounds (each runs both arms in every layout).
        #[arg(long, default_value_t = 1)]
        rounds: u32,
        /// Layouts: `near` (clients in r1, where least-loaded packs), `far`
        /// (clients in r2), comma-separated.
        #[arg(long, default_value = "near,far")]
        layouts: String,
        /// Download loops per client and server.
        #[arg(long, default_value_t = 2)]
        loops: usize,
        /// Working directory.
        #[arg(long, default_value = "/tmp/sluice-experiment")]
        dir: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Seawall §4: a host whose agent ignores congestion feedback floods VMs
    /// on two hosts; they accuse it, the controller contains it (f = 2), the
    /// switch fences it; and a control run with heavy honest traffic, where
    /// nothing may be contained (docs/ISOLATION.md, "Compromised hosts").
    Containment {
        /// Tenant spec (Figure 4's VMs are used).
        #[arg(long, default_value = "examples/tenant/figure4.yaml")]
        spec: PathBuf,
        /// Rate of the links into the flooded hosts, Mbit/s.
        #[arg(long, default_value_t = 100)]
        bottleneck_mbit: u32,
        /// The flood's rate toward each flooded VM, Mbit/s.
        #[arg(long, default_value_t = 300)]
        udp_mbit: u32,
        /// TCP flows per receiver in the control run.
        #[arg(long, default_value_t = 16)]
        tcp_flows: usize,
        /// Seconds per run.
        #[arg(long, default_value_t = 12)]
        seconds: u32,
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
    /// Kill or stop one component kind at a time (NF instance, agent, the
    /// controller, a state store primary) under paced downloads and a new
    /// connection every 100 ms through Figure 4's tenant; report established
    /// connections lost, the new-connection failure window, the time to
    /// recovery and false failovers per fault, against issue 22's goals
    /// (docs/RELIABILITY.md).
    Chaos {
        /// Tenant spec (Figure 4's east-to-a chain and web-a VIP are used).
        #[arg(long, default_value = "examples/tenant/figure4.yaml")]
        spec: PathBuf,
        /// Faults, comma-separated: instance, agent, agent-stop, controller
        /// (with several controllers: the leader), store-primary,
        /// etcd-member (or none: only the soak).
        #[arg(
            long,
            default_value = "instance,agent,agent-stop,controller,store-primary,etcd-member"
        )]
        faults: String,
        /// Repetitions of each fault.
        #[arg(long, default_value_t = 3)]
        repeat: u32,
        /// Seconds of the same load without faults at the end, counting
        /// false failovers (0: none; issue 22's goal is measured over 600).
        #[arg(long, default_value_t = 0)]
        soak: u64,
        /// Concurrent paced downloads (1 MiB each).
        #[arg(long, default_value_t = 8)]
        downloads: usize,
        /// Rate of each download, KiB/s.
        #[arg(long, default_value_t = 256)]
        rate_kib: u64,
        /// The state store: `cluster` (3 primaries with a replica each; needed
        /// by store-primary) or `single`.
        #[arg(long, default_value = "cluster")]
        store: String,
        /// Controllers: 3 on a three-member etcd cluster, one leading
        /// (needed by etcd-member), or 1 on a SQLite file.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=5))]
        controllers: u32,
        /// Working directory.
        #[arg(long, default_value = "/tmp/sluice-experiment")]
        dir: PathBuf,
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

/// Runs one experiment.
pub fn run(what: ExperimentCmd) -> Result<(), CliError> {
    match what {
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
        } => isolation(
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
        ExperimentCmd::Placement {
            spec,
            uplink_mbit,
            free_uplink_mbit,
            uplink_target,
            distribution_classes,
            queue_kb,
            dataplane_threads,
            warmup,
            seconds,
            rounds,
            loops,
            layouts,
            dir,
            json,
        } => placement(
            &spec,
            &dir,
            &sluice_testbed::placement::PlacementOptions {
                uplink_mbit,
                free_uplink_mbit,
                uplink_target: uplink_target
                    .map(|t| sluice_controller::distribution::parse_target(&t))
                    .transpose()
                    .map_err(|e| CliError::flag("uplink-target", e))?,
                classes: distribution_classes,
                queue_kb,
                warmup,
                seconds,
                rounds,
                loops,
                layouts: sluice_testbed::placement::Layout::parse_list(&layouts)
                    .map_err(|e| CliError::flag("layouts", e.to_string()))?,
                dataplane_threads,
            },
            json,
        ),
        ExperimentCmd::Containment {
            spec,
            bottleneck_mbit,
            udp_mbit,
            tcp_flows,
            seconds,
            dir,
            json,
        } => containment(
            &spec,
            &dir,
            sluice_testbed::containment::ContainmentOptions {
                bottleneck_mbit,
                udp_mbit,
                tcp_flows,
                seconds,
                ..Default::default()
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
        } => failover(
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
        } => scaling(
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
                target_ms: target_ms.unwrap_or(if metric == "reported" { 100.0 } else { 10.0 }),
                metric,
                ..Default::default()
            },
            json,
        ),
        ExperimentCmd::Chaos {
            spec,
            faults,
            repeat,
            soak,
            downloads,
            rate_kib,
            store,
            controllers,
            dir,
            json,
        } => chaos(
            &spec,
            &faults,
            ChaosLoad {
                repeat,
                soak,
                downloads,
                rate_kib,
            },
            &store,
            controllers,
            &dir,
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
        } => elasticity(
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
    }
}

/// `sluice experiment isolation`: the contests on a lab per setting.
pub fn isolation(
    spec: &Path,
    dir: &Path,
    settings: &str,
    o: sluice_testbed::isolation::IsolationOptions,
    json: bool,
) -> Result<(), CliError> {
    use sluice_testbed::isolation as iso;
    let mut on = Vec::new();
    for s in settings.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match s {
            "off" => on.push(false),
            "on" => on.push(true),
            x => {
                return Err(CliError::flag(
                    "seawall",
                    format!("`{x}` is neither `off` nor `on`"),
                ))
            }
        }
    }
    if on.is_empty() {
        return Err(CliError::flag("seawall", "name at least one of off, on"));
    }
    if !(1..=sluice_tenant::MAX_WEIGHT).contains(&o.victim_weight) {
        return Err(CliError::flag(
            "victim-weight",
            format!(
                "{} is not from 1 to {}",
                o.victim_weight,
                sluice_tenant::MAX_WEIGHT
            ),
        ));
    }
    guard(dir)?;
    // A weighted victim gets a service of its own, in a copy of the spec.
    let weighted;
    let spec = if o.victim_weight == 1 {
        spec
    } else {
        let text = std::fs::read_to_string(spec).map_err(CliError::io(spec))?;
        let text = iso::weighted_spec(&text, o.victim_weight)?;
        std::fs::create_dir_all(dir).map_err(CliError::io(dir))?;
        weighted = dir.join("isolation-spec.yaml");
        std::fs::write(&weighted, text).map_err(CliError::io(&weighted))?;
        weighted.as_path()
    };
    let mut contests = Vec::new();
    for sw in on {
        if !json {
            eprintln!("testbed with Seawall {} ...", if sw { "on" } else { "off" });
        }
        let lab = Lab::up(&options_with(spec, 3, dir, false, sw)?)?;
        contests.extend(iso::contests(&lab, &o)?);
        drop(lab);
    }
    let r = iso::IsolationReport {
        options: o,
        contests,
    };
    if json {
        outln!("{}", serde_json::to_string(&r).expect("report serialises"))?;
    } else {
        iso::print(&r);
    }
    Ok(())
}

/// `sluice experiment placement`: both arms, round by round.
pub fn placement(
    spec: &Path,
    dir: &Path,
    o: &sluice_testbed::placement::PlacementOptions,
    json: bool,
) -> Result<(), CliError> {
    if o.uplink_mbit == 0 {
        return Err(CliError::flag("uplink-mbit", "must be at least 1"));
    }
    if o.seconds == 0 {
        return Err(CliError::flag("seconds", "must be at least 1"));
    }
    guard(dir)?;
    let base = options(spec, 4, dir, true)?;
    let r = sluice_testbed::placement::run(&base, o, |m| {
        if !json {
            eprintln!("{m}");
        }
    })?;
    if json {
        outln!("{}", serde_json::to_string(&r).expect("report serialises"))?;
    } else {
        sluice_testbed::placement::print(&r);
    }
    Ok(())
}

/// `sluice experiment containment`: the attack on a lab whose host 3 is
/// subverted, the control run on a lab without.
pub fn containment(
    spec: &Path,
    dir: &Path,
    o: sluice_testbed::containment::ContainmentOptions,
    json: bool,
) -> Result<(), CliError> {
    use sluice_testbed::containment as ct;
    guard(dir)?;
    let mut runs = Vec::new();
    for kind in ct::Kind::ALL {
        let attack = kind.subverted();
        if !json {
            eprintln!(
                "{}: testbed with 4 hosts, Seawall on{} ...",
                kind.name(),
                if attack { ", host 3 subverted" } else { "" }
            );
        }
        let mut opts = options_with(spec, 4, dir, false, true)?;
        if attack {
            opts.subverted = vec![3];
        }
        let lab = Lab::up(&opts)?;
        ct::limit(&lab, &o)?;
        runs.push(ct::run(&lab, kind, &o)?);
        drop(lab);
    }
    let r = ct::ContainmentReport { options: o, runs };
    if json {
        outln!("{}", serde_json::to_string(&r).expect("report serialises"))?;
    } else {
        ct::print(&r);
    }
    Ok(())
}

/// `sluice experiment chaos`'s repetitions and load.
#[derive(Debug, Clone, Copy)]
pub struct ChaosLoad {
    /// Repetitions of each fault.
    pub repeat: u32,
    /// Seconds of soak at the end.
    pub soak: u64,
    /// Concurrent paced downloads.
    pub downloads: usize,
    /// Each download's rate, KiB/s.
    pub rate_kib: u64,
}

/// `sluice experiment chaos`: one lab, every fault in turn, then the soak.
/// Goals not met are reported, not an error: the run itself succeeded.
#[allow(clippy::too_many_arguments)]
pub fn chaos(
    spec: &Path,
    faults: &str,
    load: ChaosLoad,
    store: &str,
    controllers: u32,
    dir: &Path,
    json: bool,
) -> Result<(), CliError> {
    use sluice_testbed::chaos as ch;
    let ChaosLoad {
        repeat,
        soak,
        downloads,
        rate_kib,
    } = load;
    let faults =
        ch::Fault::parse_list(faults).map_err(|e| CliError::flag("faults", e.to_string()))?;
    if controllers < 2 && faults.contains(&ch::Fault::EtcdMember) {
        return Err(CliError::flag(
            "faults",
            "etcd-member needs replicated controllers on etcd: give --controllers 3 (or leave etcd-member out)",
        ));
    }
    if faults.is_empty() && soak == 0 {
        return Err(CliError::flag(
            "faults",
            "nothing to do: name a fault, or give --soak SECONDS",
        ));
    }
    if repeat == 0 && soak == 0 {
        return Err(CliError::flag("repeat", "must be at least 1"));
    }
    if downloads == 0 || rate_kib == 0 {
        return Err(CliError::flag(
            "downloads",
            "--downloads and --rate-kib must be at least 1",
        ));
    }
    let store: sluice_testbed::lab::StoreKind = store
        .parse()
        .map_err(|e: sluice_testbed::lab::LabError| CliError::flag("store", e.to_string()))?;
    guard(dir)?;
    let mut opts = options(spec, 3, dir, true)?;
    opts.store = store;
    opts.controllers = controllers;
    if !json {
        eprintln!("chaos: testbed with 3 hosts, store {store:?}, {controllers} controller(s) ...");
    }
    let mut lab = Lab::up(&opts)?;
    let o = ch::ChaosOptions {
        faults,
        repeat,
        soak_s: soak,
        downloads,
        rate_kib,
        ..Default::default()
    };
    let r = ch::run(&mut lab, &o);
    drop(lab);
    let r = r?;
    if json {
        outln!("{}", serde_json::to_string(&r).expect("report serialises"))?;
    } else {
        ch::print(&r);
    }
    Ok(())
}

/// `sluice experiment failover`.
pub fn failover(
    spec: &Path,
    dir: &Path,
    o: &sluice_testbed::experiments::FailoverOptions,
    json: bool,
) -> Result<(), CliError> {
    guard(dir)?;
    let lab = Lab::up(&options(spec, 3, dir, true)?)?;
    if !json {
        print_state(lab.state())?;
        outln!(
            "{} downloads of {} KiB at {}/s each; killing {}/{}/0 after {:?}",
            o.downloads,
            o.size / 1024,
            o.rate,
            lab.state().tenant,
            o.middlebox,
            o.kill_after
        )?;
    }
    let r = sluice_testbed::experiments::failover(&lab, o)?;
    drop(lab);
    if json {
        outln!("{}", serde_json::to_string(&r).expect("report serialises"))?;
    } else {
        sluice_testbed::experiments::print_failover(&r);
    }
    Ok(())
}

/// `sluice experiment elasticity`: one lab per variant, brought up from the base
/// spec with the middlebox's state and affinity set, run, and torn down.
pub fn elasticity(
    spec: &Path,
    variants: &str,
    capacity_mbps: Option<f64>,
    dir: &Path,
    out: &Path,
    o: &sluice_testbed::elasticity::ElasticityOptions,
    json: bool,
) -> Result<(), CliError> {
    use sluice_testbed::elasticity as el;
    let base = std::fs::read_to_string(spec).map_err(CliError::io(spec))?;
    let mut parsed = Vec::new();
    for v in variants.split(',').map(str::trim).filter(|v| !v.is_empty()) {
        let (state, affinity) = v
            .split_once('/')
            .filter(|(s, a)| {
                ["shared", "cached", "local"].contains(s) && ["hash", "pinned"].contains(a)
            })
            .ok_or_else(|| {
                CliError::flag(
                    "variants",
                    format!("`{v}` is not state/affinity (shared|cached|local / hash|pinned)"),
                )
            })?;
        let text = el::variant_spec(&base, &o.middlebox, state, affinity, capacity_mbps)
            .map_err(CliError::variant(spec))?;
        parsed.push((v.to_string(), text));
    }
    if parsed.is_empty() {
        return Err(CliError::flag("variants", "no variant given"));
    }
    std::fs::create_dir_all(dir).map_err(CliError::io(dir))?;
    // Once: each variant's lab lives in `dir` in turn, and an interruption removes
    // whichever is up.
    guard(dir)?;
    if !json {
        outln!(
            "{} groups of {} downloads at {} KiB/s, {:?} apart, each {:?}; {} out at {:?}, in at {:?}{}",
            o.steps,
            o.flows_per_step,
            o.rate_kib,
            o.step,
            o.duration(),
            o.middlebox,
            o.scale_out_at(),
            o.scale_in_at(),
            capacity_mbps
                .map(|c| format!("; {c} Mbit/s per instance"))
                .unwrap_or_default()
        )?;
    }
    let mut runs = Vec::new();
    for (label, text) in parsed {
        let file = dir.join(format!("elasticity-{}.yaml", label.replace('/', "-")));
        std::fs::write(&file, text).map_err(CliError::io(&file))?;
        let lab = Lab::up(&options(&file, 3, dir, true)?)?;
        if !json {
            outln!("{label}: lab up, running")?;
        }
        let r = sluice_testbed::elasticity::elasticity(&lab, o, &label).map_err(CliError::from);
        drop(lab);
        runs.push(r?);
    }
    el::write_outputs(&runs, out).map_err(CliError::io(out))?;
    if json {
        outln!(
            "{}",
            serde_json::to_string(&runs).expect("report serialises")
        )?;
    } else {
        el::print_elasticity(&runs);
        outln!("wrote {}/elasticity.{{csv,svg,json}}", out.display())?;
    }
    Ok(())
}

/// `sluice experiment scaling`: one lab per strategy.
pub fn scaling(
    spec: &Path,
    strategies: &str,
    phases: &str,
    dir: &Path,
    out: &Path,
    mut o: sluice_testbed::scaling::ScalingOptions,
    json: bool,
) -> Result<(), CliError> {
    use sluice_testbed::scaling as sc;
    let secs: Vec<u64> = phases
        .split(',')
        .map(|p| p.trim().parse::<u64>())
        .collect::<Result<_, _>>()
        .map_err(|_| bad_phases(phases))?;
    let [ramp, hold, after] = secs[..] else {
        return Err(bad_phases(phases));
    };
    o.ramp = std::time::Duration::from_secs(ramp);
    o.hold = std::time::Duration::from_secs(hold);
    o.after = std::time::Duration::from_secs(after);
    let list: Vec<&str> = strategies
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if let Some(bad) = list.iter().find(|s| !["greedy", "none", "all"].contains(s)) {
        return Err(CliError::flag(
            "strategies",
            format!("`{bad}` is not greedy, none or all"),
        ));
    }
    if list.is_empty() {
        return Err(CliError::flag("strategies", "none given"));
    }
    if !["reported", "handshake_ms"].contains(&o.metric.as_str()) {
        return Err(CliError::flag(
            "metric",
            format!("`{}` is not reported or handshake_ms", o.metric),
        ));
    }
    if !(0.0..1.0).contains(&o.settle) {
        return Err(CliError::flag(
            "settle",
            format!("{} is not in [0, 1)", o.settle),
        ));
    }
    std::fs::create_dir_all(dir).map_err(CliError::io(dir))?;
    guard(dir)?;
    if !json {
        outln!(
            "{} -> {} req/s over {ramp} s, {hold} s at the peak, then {} req/s for {after} s; {} B objects",
            o.rate_start, o.rate_peak, o.rate_after, o.object
        )?;
    }
    let mut runs = Vec::new();
    for s in list {
        let lab = Lab::up(&options(spec, 3, dir, true)?)?;
        if !json {
            outln!("{s}: lab up, running")?;
        }
        let r = sc::scaling(&lab, &o, s).map_err(CliError::from);
        drop(lab);
        runs.push(r?);
    }
    std::fs::create_dir_all(out).map_err(CliError::io(out))?;
    std::fs::write(out.join("scaling.csv"), sc::csv(&runs))
        .and_then(|_| std::fs::write(out.join("scaling.svg"), sc::svg(&runs)))
        .and_then(|_| {
            std::fs::write(
                out.join("scaling.json"),
                serde_json::to_string_pretty(&runs).unwrap_or_default(),
            )
        })
        .map_err(CliError::io(out))?;
    if json {
        outln!(
            "{}",
            serde_json::to_string(&runs).expect("report serialises")
        )?;
    } else {
        sc::print_scaling(&runs);
        outln!("wrote {}/scaling.{{csv,svg,json}}", out.display())?;
    }
    Ok(())
}

fn bad_phases(phases: &str) -> CliError {
    CliError::flag(
        "phases",
        format!("`{phases}` is not three whole seconds, e.g. 30,100,60"),
    )
}
