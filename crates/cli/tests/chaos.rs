//! `sluice experiment chaos` (issue 22) in small: Figure 4's tenant on a
//! namespace testbed, one NF instance SIGKILLed and one agent SIGKILLed
//! under paced downloads and a new connection every 100 ms. Needs root,
//! nginx, curl and redis-server (scripts/common.sh installs them).
//!
//! Behaviour only: no established download may be lost to either fault and
//! the report has a row per fault; the windows and recovery times it
//! measures are printed, never asserted (docs/RELIABILITY.md has them).

mod common;

use sluice_testbed::chaos::{self, ChaosOptions, Fault};
use sluice_testbed::lab::{Lab, LabOptions, StoreKind};

#[test]
fn a_killed_instance_and_a_killed_agent_lose_no_established_connection() {
    let dir = tempfile::tempdir().unwrap();
    let mut lab = Lab::up(&LabOptions {
        store: StoreKind::Single,
        ..common::lab_options(common::figure4_spec(), dir.path())
    })
    .unwrap_or_else(|e| panic!("testbed did not come up: {e}"));
    let o = ChaosOptions {
        faults: vec![Fault::Instance, Fault::Agent],
        repeat: 1,
        downloads: 4,
        ..Default::default()
    };
    let r = chaos::run(&mut lab, &o).unwrap_or_else(|e| panic!("chaos run failed: {e}"));
    drop(lab);
    chaos::print(&r);

    let kinds: Vec<Fault> = r.faults.iter().map(|f| f.fault).collect();
    assert_eq!(kinds, [Fault::Instance, Fault::Agent]);
    for f in &r.faults {
        assert_eq!(
            f.established, 4,
            "every download was established first: {f:?}"
        );
        assert_eq!(f.established_lost, 0, "{f:?}");
        assert!(f.probes > 0, "the prober ran: {f:?}");
        assert!(f.recovery_s.is_some(), "the component came back: {f:?}");
    }
    // The instance kill is seen by the agents: its failover is explained.
    assert!(r.faults[0].failovers >= 1, "{:?}", r.faults[0]);
    let rows: Vec<Fault> = r.summary.iter().map(|s| s.fault).collect();
    assert_eq!(rows, [Fault::Instance, Fault::Agent]);
    assert!(r.summary.iter().all(|s| s.lost_goal_met));
    assert_eq!(r.controllers, 1);
}

/// Replicated controllers on etcd: the leader SIGKILLed, then an etcd
/// member: no established download is lost, and the lab is whole again
/// after each (another controller leads, every agent in sync).
#[test]
fn a_killed_leader_and_a_killed_etcd_member_lose_no_established_connection() {
    if sluice_etcd::server::etcd_binary().is_none() {
        eprintln!("skipped: etcd is not installed (apt-get install etcd-server)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut lab = Lab::up(&LabOptions {
        store: StoreKind::Single,
        controllers: 3,
        ..common::lab_options(common::figure4_spec(), dir.path())
    })
    .unwrap_or_else(|e| panic!("testbed did not come up: {e}"));
    let o = ChaosOptions {
        faults: vec![Fault::Controller, Fault::EtcdMember],
        repeat: 1,
        downloads: 4,
        ..Default::default()
    };
    let r = chaos::run(&mut lab, &o).unwrap_or_else(|e| panic!("chaos run failed: {e}"));
    drop(lab);
    chaos::print(&r);
    assert_eq!(r.controllers, 3);
    let kinds: Vec<Fault> = r.faults.iter().map(|f| f.fault).collect();
    assert_eq!(kinds, [Fault::Controller, Fault::EtcdMember]);
    for f in &r.faults {
        assert_eq!(f.established, 4, "{f:?}");
        assert_eq!(f.established_lost, 0, "{f:?}");
        assert!(f.recovery_s.is_some(), "the lab came back: {f:?}");
    }
    assert!(
        r.faults[0].target.starts_with("leading controller"),
        "{:?}",
        r.faults[0]
    );
}

#[test]
fn the_command_refuses_unknown_faults_and_etcd_member_without_etcd_before_touching_anything() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let (code, _, err) = common::sluice(&[
        "experiment",
        "chaos",
        "--faults",
        "instance,router",
        "--dir",
        d,
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("`router`") && err.contains("store-primary"),
        "{err}"
    );
    let (code, _, err) = common::sluice(&[
        "experiment",
        "chaos",
        "--faults",
        "etcd-member",
        "--controllers",
        "1",
        "--dir",
        d,
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("--controllers 3"), "{err}");
    let (code, _, err) = common::sluice(&["experiment", "chaos", "--faults", "none", "--dir", d]);
    assert_ne!(code, 0);
    assert!(err.contains("--soak"), "{err}");
    assert!(
        !dir.path().join("testbed.json").exists(),
        "no lab was brought up"
    );
}
