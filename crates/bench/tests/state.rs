//! `sluice bench state`'s machinery on a tiny trace against a private redis-server:
//! the remote backend must change how fast packets go, never what happens to them.

use sluice_bench::nf;
use sluice_bench::state::{
    compare, functions, open_remote, percentile_us, run_once, FlowsKind, Workload,
};
use sluice_state::LocalStore;
use sluice_state_redis::server::RedisServer;
use sluice_trafficgen::{generate, TrafficSpec};

fn tiny(kind: FlowsKind) -> Workload {
    let spec = TrafficSpec {
        flows: 24,
        packets_per_flow: 40,
        frame_size: 128,
        concurrency: 8,
        ..Default::default()
    };
    Workload::from_trace(kind, 128, generate(&spec), 32)
}

#[test]
fn remote_and_local_runs_agree_packet_for_packet() {
    let srv = RedisServer::start(&[]).expect("start redis-server");
    let dir = tempfile::tempdir().unwrap();
    let w = tiny(FlowsKind::Short);
    let mut digests = Vec::new();
    for (name, text, paper) in functions() {
        let d = dir.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        let spec = nf::load_spec(&d, &text).unwrap();
        let mut local = LocalStore::new();
        let l = run_once(&spec, &d, &format!("t-{name}-l"), &w, &mut local, true).unwrap();
        let mut remote = open_remote(&srv.url()).unwrap();
        let r = run_once(&spec, &d, &format!("t-{name}-r"), &w, &mut *remote, true).unwrap();

        assert_eq!(l.packets, w.trace.len() as u64);
        assert_eq!(l.batches.len(), w.established.len());
        assert_eq!((l.forwarded, l.dropped), (r.forwarded, r.dropped), "{name}");
        assert_eq!(l.forwarded, l.packets, "{name}: the traffic is admitted");
        assert_eq!(l.digest, r.digest, "{name}: same verdicts and bytes");
        assert_eq!(l.store_errors + r.store_errors, 0, "{name}");
        assert!(l.counters.reads > 0, "{name}: reads state");
        assert!(
            l.counters.writes + l.counters.atomics > 0,
            "{name}: writes state"
        );
        assert_eq!(l.counters.reads, r.counters.reads, "{name}");
        assert_eq!(l.counters.writes, r.counters.writes, "{name}");
        assert_eq!(l.counters.atomics, r.counters.atomics, "{name}");

        let m = compare(name, &w, &l, &r, paper, &remote.describe());
        assert_eq!(m.name, format!("{name}_short_128"));
        assert_eq!(m.ops_per_packet.reads, m.ops_local.reads);
        assert!(m.ops_per_packet.reads > 0.0 && m.ops_per_packet.round_trips > 0.0);
        assert!(
            m.established_p50_us.is_some(),
            "{name}: some batches are established"
        );
        assert!(m.mpps_local > 0.0 && m.mpps_remote > 0.0);
        let json = serde_json::to_value(&m).unwrap();
        for field in [
            "name",
            "function",
            "frame_size",
            "flows",
            "mpps_local",
            "mpps_remote",
            "ratio",
            "p50_us",
            "p95_us",
            "p99_us",
            "ops_per_packet",
        ] {
            assert!(json.get(field).is_some(), "{field} missing from {json}");
        }
        assert_eq!(json["flows"], "short");
        assert!(json["ops_per_packet"]["reads"].as_f64().unwrap() > 0.0);
        digests.push((name, l.digest));
    }
    // The digest covers the bytes: the LB rewrites destinations, the monitor does not.
    let d = |n: &str| digests.iter().find(|x| x.0 == n).unwrap().1;
    assert_ne!(d("lb"), d("monitor"));
}

#[test]
fn batches_are_established_only_after_their_flows_opened() {
    let w = tiny(FlowsKind::Long);
    // The first batch opens connections; the last closes them.
    assert!(!w.established[0]);
    assert!(!w.established[w.established.len() - 1]);
    assert!(w.established.iter().any(|&e| e));
    assert_eq!(w.established.len(), w.trace.len().div_ceil(32));
    // At most 8 flows are active at once (plus one replacing a finished flow).
    assert!(
        w.flows_per_batch > 1.0 && w.flows_per_batch <= 9.0,
        "{}",
        w.flows_per_batch
    );
}

#[test]
fn percentiles_weight_each_batch_by_its_packets() {
    // 30 packets at 1 µs, 1 packet at 100 µs, 1 at 200 µs.
    let mut v = vec![(200_000, 1), (1_000, 30), (100_000, 1)];
    assert_eq!(percentile_us(&mut v, 0.5), Some(1.0));
    assert_eq!(percentile_us(&mut v, 0.95), Some(100.0));
    assert_eq!(percentile_us(&mut v, 1.0), Some(200.0));
    assert_eq!(percentile_us(&mut [], 0.5), None);
}

#[test]
fn unknown_store_urls_are_refused() {
    let err = open_remote("memcached://127.0.0.1:1").err().unwrap();
    assert!(err.contains("expected redis://"), "{err}");
}

#[test]
fn a_cluster_url_measures_the_same_operations() {
    let cluster = sluice_state_redis::server::RedisCluster::start(2).expect("start cluster");
    let dir = tempfile::tempdir().unwrap();
    let w = tiny(FlowsKind::Short);
    let (name, text, _) = functions().into_iter().next().unwrap();
    let spec = nf::load_spec(dir.path(), &text).unwrap();
    let mut local = LocalStore::new();
    let l = run_once(&spec, dir.path(), "c-l", &w, &mut local, true).unwrap();
    let mut remote = open_remote(&cluster.url()).unwrap();
    assert!(
        remote.describe().contains("cluster"),
        "{}",
        remote.describe()
    );
    let r = run_once(&spec, dir.path(), "c-r", &w, &mut *remote, true).unwrap();
    assert_eq!(l.digest, r.digest, "{name}");
    assert_eq!(l.counters.reads, r.counters.reads);
    assert_eq!(l.counters.writes, r.counters.writes);
}
