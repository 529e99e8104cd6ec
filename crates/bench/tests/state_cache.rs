//! `sluice bench state`'s cached runs: the flow cache in front of the remote store
//! must change how many round trips packets wait for, never what happens to them,
//! for every function (firewall, NAT, LB, IPS, monitor).

use sluice_bench::nf;
use sluice_bench::state::{
    compare, compare_cached, functions, open_remote, run_once, run_once_mode, run_once_with,
    FlowsKind, RunMode, Workload,
};
use sluice_state::LocalStore;
use sluice_state_redis::server::RedisServer;
use sluice_trafficgen::{generate, TrafficSpec};

#[test]
fn cached_runs_agree_and_save_round_trips() {
    let srv = RedisServer::start(&[]).expect("start redis-server");
    let dir = tempfile::tempdir().unwrap();
    let spec = TrafficSpec {
        flows: 4,
        packets_per_flow: 400,
        frame_size: 128,
        concurrency: 4,
        ..Default::default()
    };
    let w = Workload::from_trace(FlowsKind::Long, 128, generate(&spec), 32);
    for (name, text, paper) in functions() {
        let d = dir.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        let spec = nf::load_spec(&d, &text).unwrap();
        let mut local = LocalStore::new();
        let l = run_once(&spec, &d, &format!("c-{name}-l"), &w, &mut local, true).unwrap();
        let mut remote = open_remote(&srv.url()).unwrap();
        let r = run_once(&spec, &d, &format!("c-{name}-r"), &w, &mut *remote, true).unwrap();
        let mut remote = open_remote(&srv.url()).unwrap();
        let c = run_once_with(
            &spec,
            &d,
            &format!("c-{name}-c"),
            &w,
            &mut *remote,
            true,
            true,
        )
        .unwrap();
        assert_eq!(
            l.digest, c.digest,
            "{name}: same verdicts and bytes with the cache"
        );
        assert_eq!(c.store_errors, 0, "{name}");
        assert!(
            c.counters.round_trips <= r.counters.round_trips,
            "{name}: the cache never adds round trips"
        );
        // Every function: established batches wait on no round trip under a lease
        // (NAT and LB read their own direction's record, the IPS and the
        // reassembler send their scan and stream progress without waiting).
        {
            assert!(
                c.counters.round_trips * 4 < r.counters.round_trips,
                "{name}: established flows mostly skip the store ({:?} vs {:?})",
                c.counters,
                r.counters
            );
        }
        let mut m = compare(name, &w, &l, &r, paper, &remote.describe());
        m.cached = Some(compare_cached(&l, &c));
        let json = serde_json::to_value(&m).unwrap();
        assert!(json["cached"]["ops_per_packet"]["round_trips"]
            .as_f64()
            .is_some());
        assert!(json["cached"]["mpps"].as_f64().unwrap() > 0.0);
    }
}

/// Pipelined runs (prefetch of the next window, writes held until acknowledged)
/// must not change what happens to any packet either, for every function, on
/// short flows (a new connection every few batches) and long ones; and the
/// firewall, whose only store operations for a new connection are its record
/// and timer, makes fewer round trips than in the cached run.
#[test]
fn pipelined_runs_agree_with_local_state() {
    let srv = RedisServer::start(&[]).expect("start redis-server");
    let dir = tempfile::tempdir().unwrap();
    for kind in [FlowsKind::Short, FlowsKind::Long] {
        let spec = match kind {
            FlowsKind::Short => TrafficSpec::short_flows(60, 128),
            FlowsKind::Long => TrafficSpec {
                packets_per_flow: 1_500,
                ..TrafficSpec::long_flows(2, 128)
            },
        };
        let w = Workload::from_trace(kind, 128, generate(&spec), 32);
        for (name, text, _) in functions() {
            let d = dir.path().join(format!("{name}-{kind:?}"));
            std::fs::create_dir_all(&d).unwrap();
            let spec = nf::load_spec(&d, &text).unwrap();
            let mut local = LocalStore::new();
            let l = run_once(&spec, &d, &format!("p-{name}-l"), &w, &mut local, true).unwrap();
            let mut remote = open_remote(&srv.url()).unwrap();
            let c = run_once_mode(
                &spec,
                &d,
                &format!("p-{name}-{kind:?}-c"),
                &w,
                &mut *remote,
                true,
                RunMode::Cached,
            )
            .unwrap();
            for window in [1, 4] {
                let mut remote = open_remote(&srv.url()).unwrap();
                let p = run_once_mode(
                    &spec,
                    &d,
                    &format!("p-{name}-{kind:?}-p{window}"),
                    &w,
                    &mut *remote,
                    true,
                    RunMode::Pipelined(window),
                )
                .unwrap();
                assert_eq!(
                    l.digest, p.digest,
                    "{name} {kind:?} window {window}: same verdicts and bytes pipelined"
                );
                assert_eq!(p.store_errors, 0, "{name}");
                assert_eq!(
                    p.batches.len(),
                    l.batches.len(),
                    "{name}: every batch released"
                );
                if name == "firewall" && kind == FlowsKind::Short && window == 4 {
                    assert!(
                        p.counters.round_trips * 2 < c.counters.round_trips,
                        "{name}: windows of prefetches replace per-batch round trips \
                         ({:?} vs {:?})",
                        p.counters,
                        c.counters
                    );
                }
            }
        }
    }
}
