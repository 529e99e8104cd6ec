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
    let c =
        Cli::try_parse_from(["x", "bench-scale", "--quick", "--sizes", "50:20,100:50"]).unwrap();
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
