//! The state store's health as the controller sees it, against a real
//! redis-server with authentication on: killed (SIGKILL), `/healthz` turns 503
//! naming it and `sluice_controller_store_up` drops to 0; restarted empty on
//! the same port, the controller reports `store_lost_data`, writes its
//! marker again, and `/healthz` is 200 again.

use std::time::{Duration, Instant};

use sluice_controller::client::{Client, ClientError};
use sluice_controller::model::StatusInfo;
use sluice_controller::store_health::Role;
use sluice_controller::store_probe::MARKER_KEY;
mod common;
use sluice_state_redis::acl::{Admin, Value};
use sluice_state_redis::server::RedisServer;
use sluice_state_redis::Secret;

const ADMIN_PW: &str = "controller-admin-pw-51c2";

/// Polls `f` until it holds (a safety net for real processes, not a timing
/// assertion).
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `promtool check metrics`'s complaints about `text` (None without promtool).
fn promtool(text: &str) -> Option<String> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    child.stdin.take()?.write_all(text.as_bytes()).ok()?;
    let out = child.wait_with_output().ok()?;
    Some(if out.status.success() {
        String::new()
    } else {
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn kinds(c: &Client) -> Vec<String> {
    c.events(0)
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .filter(|k| k.starts_with("store_"))
        .collect()
}

#[test]
fn a_killed_store_fails_healthz_and_one_restarted_empty_is_reported_as_lost_data() {
    let dir = tempfile::tempdir().unwrap();
    let mut redis = RedisServer::start(&[]).expect("start redis-server");
    redis.secure("admin", &Secret::new(ADMIN_PW)).unwrap();
    let pw_file = dir.path().join("admin.pw");
    std::fs::write(&pw_file, format!("{ADMIN_PW}\n")).unwrap();
    let url = format!(
        "redis://admin@127.0.0.1:{}?password_file={}",
        redis.port(),
        pw_file.display()
    );
    let node = format!("127.0.0.1:{}", redis.port());
    let (server, token) = common::start_with_state(dir.path(), &url);
    let c = Client::new(&server.url()).with_token(Some(&token));
    let marker = || {
        let mut a = Admin::open(&url).unwrap();
        match a.command(0, &[b"GET", MARKER_KEY.as_bytes()]).unwrap() {
            Value::Bulk(v) => v.map(|b| String::from_utf8(b).unwrap()),
            other => panic!("GET {MARKER_KEY}: {other:?}"),
        }
    };
    let up_line = |v: u8| format!("sluice_controller_store_up{{node=\"{node}\"}} {v}");

    // Up: healthy, the node a primary, its marker written.
    let s: StatusInfo = c.get("/v1/status").unwrap();
    assert_eq!(s.store.kind, "redis");
    assert_eq!(s.store.nodes.len(), 1);
    assert_eq!(s.store.nodes[0].node, node);
    assert!(s.store.nodes[0].up && s.store.healthy, "{s:?}");
    assert_eq!(s.store.nodes[0].role, Some(Role::Primary));
    assert!(s.store.nodes[0].last_ok_ms.is_some());
    assert!(c.get_raw("/healthz").unwrap().contains("ok"));
    let first = marker().expect("the controller marks the store");
    let metrics = c.get_raw("/metrics").unwrap();
    assert!(metrics.contains(&up_line(1)), "{metrics}");
    assert!(
        metrics.contains("sluice_controller_store_lost_data_total 0"),
        "{metrics}"
    );
    assert!(metrics.contains("sluice_controller_store_probe_seconds "));
    assert!(kinds(&c).is_empty(), "{:?}", kinds(&c));

    // Killed: 503 naming the node, store_up 0, one event.
    redis.kill();
    let mut body = String::new();
    eventually("/healthz answers 503", || match c.get_raw("/healthz") {
        Err(ClientError::Api {
            status: 503,
            message,
        }) => {
            body = message;
            true
        }
        _ => false,
    });
    assert!(
        body.contains(&node) && body.contains("store_failing"),
        "{body}"
    );
    let metrics = c.get_raw("/metrics").unwrap();
    assert!(metrics.contains(&up_line(0)), "{metrics}");
    let s: StatusInfo = c.get("/v1/status").unwrap();
    assert!(!s.store.healthy && !s.store.nodes[0].up, "{s:?}");
    assert!(s.store.nodes[0].error.is_some());
    assert_eq!(kinds(&c), ["store_unreachable"]);

    // Restarted empty on the same port: lost data reported, the marker back,
    // healthy again.
    redis.restart().expect("restart redis-server");
    eventually("store_lost_data is reported", || {
        kinds(&c).contains(&"store_lost_data".to_string())
    });
    eventually("/healthz answers 200", || c.get_raw("/healthz").is_ok());
    assert_eq!(
        kinds(&c),
        ["store_unreachable", "store_recovered", "store_lost_data"]
    );
    let lost = c
        .events(0)
        .unwrap()
        .into_iter()
        .find(|e| e.kind == "store_lost_data")
        .unwrap();
    assert!(lost.reason.contains(&node), "{}", lost.reason);
    eventually("the marker is written again", || {
        marker().as_ref() == Some(&first)
    });
    let s: StatusInfo = c.get("/v1/status").unwrap();
    assert!(s.store.healthy && s.store.nodes[0].up, "{s:?}");
    assert_eq!(s.store.nodes[0].lost_data_count, 1);
    assert_eq!(s.store.lost_data_total, 1);
    let metrics = c.get_raw("/metrics").unwrap();
    assert!(metrics.contains(&up_line(1)), "{metrics}");
    assert!(
        metrics.contains("sluice_controller_store_lost_data_total 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("sluice_controller_events_total{kind=\"store_lost_data\"} 1"),
        "{metrics}"
    );
    if let Some(complaints) = promtool(&metrics) {
        assert!(complaints.is_empty(), "promtool: {complaints}\n{metrics}");
    }
    server.shutdown();
}

/// A `local` store has nothing to probe: healthy, no store metrics.
#[test]
fn a_local_store_is_not_probed() {
    let dir = tempfile::tempdir().unwrap();
    let (server, token) = common::start_with_state(dir.path(), "local");
    let c = Client::new(&server.url()).with_token(Some(&token));
    let s: StatusInfo = c.get("/v1/status").unwrap();
    assert_eq!(s.store.kind, "local");
    assert!(s.store.healthy && s.store.nodes.is_empty());
    assert!(c.get_raw("/healthz").unwrap().contains("ok"));
    assert!(!c
        .get_raw("/metrics")
        .unwrap()
        .contains("sluice_controller_store_"));
    server.shutdown();
}

/// A Redis Cluster: one primary killed, its slot range has no reachable
/// primary and `/healthz` names it though the other node answers; restarted
/// empty (its cluster configuration kept), it is back with its slots and
/// reported as having lost its data.
#[test]
fn a_cluster_slot_range_without_a_primary_fails_healthz() {
    use sluice_controller::store_probe::marker_key;
    use sluice_state_redis::server::RedisCluster;
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = RedisCluster::start(2).expect("start a redis cluster");
    let url = cluster.url();
    let nodes: Vec<String> = cluster
        .nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port()))
        .collect();
    let (server, token) = common::start_with_state(dir.path(), &url);
    let c = Client::new(&server.url()).with_token(Some(&token));
    let s: StatusInfo = c.get("/v1/status").unwrap();
    assert_eq!(s.store.kind, "redis-cluster");
    assert!(s.store.healthy, "{s:?}");
    assert!(s
        .store
        .nodes
        .iter()
        .all(|n| n.up && n.role == Some(Role::Primary)));
    // Each primary holds its own marker, in a slot it serves.
    let mut admin = Admin::open(&url).unwrap();
    for (i, first) in [(0usize, 0u16), (1, 8192)] {
        let key = marker_key(first);
        match admin.command(i, &[b"GET", key.as_bytes()]).unwrap() {
            Value::Bulk(Some(_)) => {}
            other => panic!("{}: GET {key}: {other:?}", nodes[i]),
        }
    }

    cluster.nodes[0].kill();
    let mut body = String::new();
    eventually("/healthz answers 503", || match c.get_raw("/healthz") {
        Err(ClientError::Api {
            status: 503,
            message,
        }) => {
            body = message;
            true
        }
        _ => false,
    });
    assert!(
        body.contains(&nodes[0]) && body.contains("slots 0-8191") && !body.contains(&nodes[1]),
        "{body}"
    );
    let s: StatusInfo = c.get("/v1/status").unwrap();
    assert!(!s.store.nodes[0].up && s.store.nodes[1].up, "{s:?}");

    cluster.nodes[0].restart().expect("restart the node");
    eventually("/healthz answers 200", || c.get_raw("/healthz").is_ok());
    eventually("store_lost_data is reported", || {
        kinds(&c).contains(&"store_lost_data".to_string())
    });
    let lost = c
        .events(0)
        .unwrap()
        .into_iter()
        .find(|e| e.kind == "store_lost_data")
        .unwrap();
    assert!(lost.reason.contains(&nodes[0]), "{}", lost.reason);
    let s: StatusInfo = c.get("/v1/status").unwrap();
    assert_eq!(s.store.nodes[0].lost_data_count, 1);
    assert_eq!(s.store.nodes[1].lost_data_count, 0);
    server.shutdown();
}

/// A cluster with a replica per primary and a node timeout (60 s) longer than
/// the test: one primary SIGKILLed, the controller sees its port closed and
/// asks its replica to take over (`store_takeover`), which the cluster on its
/// own would do only after the timeout. Its slots serve again and
/// `/healthz` is 200.
#[test]
fn a_dead_cluster_primary_is_replaced_at_the_controllers_request() {
    use sluice_state_redis::server::{replication_role, RedisCluster};
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = RedisCluster::start_replicated(3, 1, 60_000).expect("start a redis cluster");
    let url = cluster.url();
    let (server, token) = common::start_with_state(dir.path(), &url);
    let c = Client::new(&server.url()).with_token(Some(&token));
    eventually("the store to be healthy", || {
        c.get::<StatusInfo>("/v1/status")
            .is_ok_and(|s| s.store.healthy && s.store.nodes.iter().all(|n| n.up))
    });
    let dead = format!("127.0.0.1:{}", cluster.nodes[0].port());
    let heir = format!("127.0.0.1:{}", cluster.replicas[0].port());
    let heir_port = cluster.replicas[0].port();
    cluster.nodes[0].kill();
    // 30 s at most, half the node timeout: only the controller's request
    // can have promoted the replica by then.
    let promoted = (0..600).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        replication_role(heir_port, None, None).is_ok_and(|r| r == "master")
    });
    assert!(
        promoted,
        "the killed primary's replica never took over: {:?}",
        c.events(0)
            .unwrap()
            .iter()
            .map(|e| (&e.kind, &e.reason))
            .collect::<Vec<_>>()
    );
    eventually("/healthz answers 200", || c.get_raw("/healthz").is_ok());
    let t = c
        .events(0)
        .unwrap()
        .into_iter()
        .find(|e| e.kind == "store_takeover")
        .expect("a store_takeover event");
    assert!(
        t.reason.contains(&dead) && t.reason.contains(&heir),
        "{}",
        t.reason
    );
    // The other primaries were left alone.
    for r in &cluster.replicas[1..] {
        assert_eq!(replication_role(r.port(), None, None).unwrap(), "slave");
    }
    server.shutdown();
}
