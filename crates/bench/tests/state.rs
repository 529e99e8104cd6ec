//! `sluice bench state`'s machinery on a tiny trace against a private redis-server:
//! the remote backend must change how fast packets go, never what happens to them.

use sluice_bench::nf;
use sluice_bench::state::{
    compare, functions, open_remote, percentile_us, run_once, tenant_url, FlowsKind, Workload,
};
use sluice_state::LocalStore;
use sluice_state_redis::server::RedisServer;
use sluice_trafficgen::{generate, TrafficSpec};
use sluice_wire::parse::parse_frame;

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
    // Every function also runs as a tenant's restricted store user (the
    // auth+prefix configuration): a command or key it is not allowed shows up
    // as store errors or changed verdicts.
    let authed_url = tenant_url(&srv.url(), dir.path()).unwrap();
    assert!(authed_url.contains("sluice-t-bench@") && authed_url.contains("prefix=t.bench."));
    for (name, text, paper) in functions() {
        let d = dir.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        let spec = nf::load_spec(&d, &text).unwrap();
        let mut local = LocalStore::new();
        let l = run_once(&spec, &d, &format!("t-{name}-l"), &w, &mut local, true).unwrap();
        let mut remote = open_remote(&srv.url()).unwrap();
        let r = run_once(&spec, &d, &format!("t-{name}-r"), &w, &mut *remote, true).unwrap();
        let mut authed = open_remote(&authed_url).unwrap();
        let a = run_once(&spec, &d, &format!("t-{name}-a"), &w, &mut *authed, true).unwrap();
        assert_eq!(a.store_errors, 0, "{name}: as the tenant user");
        assert_eq!(a.digest, r.digest, "{name}: as the tenant user");
        assert_eq!(a.counters, r.counters, "{name}: as the tenant user");

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

#[test]
fn the_lb_workload_has_its_replies_come_from_the_backends() {
    use sluice_wire::rewrite::verify_all_checksums;
    use sluice_wire::IpAddr;
    let dir = tempfile::tempdir().unwrap();
    let w = tiny(FlowsKind::Short);
    let spec = nf::load_spec(dir.path(), &nf::lb_chain()).unwrap();
    let t = sluice_bench::state::replies_from_backends(&spec, dir.path(), &w.trace).unwrap();
    assert_eq!(t.len(), w.trace.len());
    let is_vip = |a: &IpAddr| matches!(a, IpAddr::V4([192, 0, 2, _]));
    let is_backend = |a: &IpAddr| matches!(a, IpAddr::V4([198, 51, 100, _]));
    let (mut from_backends, mut to_vips) = (0, 0);
    for i in 0..t.len() {
        let (ts0, before) = w.trace.get(i);
        let (ts1, after) = t.get(i);
        assert_eq!(ts0, ts1);
        assert!(verify_all_checksums(after), "frame {i}");
        let (b, a) = (
            parse_frame(before).unwrap().flow,
            parse_frame(after).unwrap().flow,
        );
        if is_vip(&b.dst) {
            // Clients still address the VIP.
            assert_eq!(a, b);
            to_vips += 1;
        } else {
            // Every reply now comes from a backend, to the same client.
            assert!(is_vip(&b.src), "{b:?}");
            assert!(is_backend(&a.src), "frame {i}: {a:?}");
            assert_eq!((a.dst, a.dst_port), (b.dst, b.dst_port));
            from_backends += 1;
        }
    }
    assert!(from_backends > 0 && to_vips > 0);
    // Through the LB, the replies leave from the VIP again: it recognised every
    // one as a reply of a connection it had sent to that backend.
    let registry = sluice_builtin::registry();
    let mut chain =
        sluice_chain::Chain::from_spec(&spec, dir.path(), &registry, sluice_chain::Sharing::Shared)
            .unwrap();
    let mut local = LocalStore::new();
    let mut pool = sluice_packet::PacketPool::new(64);
    let mut batch = sluice_packet::Batch::with_capacity(32);
    let mut replies_back = 0;
    for i in 0..t.len() {
        let (ts, f) = t.get(i);
        batch.push_frame(&mut pool, f, ts, 0);
        chain.process(&mut batch, &mut local);
        let p = &batch.pkts[0];
        assert_eq!(p.verdict, sluice_packet::Verdict::Forward, "frame {i}");
        let out = parse_frame(p.data()).unwrap().flow;
        if !is_vip(&parse_frame(f).unwrap().flow.dst) {
            assert!(is_vip(&out.src), "frame {i}: {out:?}");
            replies_back += 1;
        }
        batch.recycle(&mut pool);
    }
    assert_eq!(replies_back, from_backends);
}
