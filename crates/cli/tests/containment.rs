//! `sluice get containment` and `sluice release HOST` against a controller on
//! loopback: two hosts accuse a third of ignoring congestion feedback, the
//! CLI shows it contained, an operator releases it.

mod common;
use common::sluice;

use sluice_controller::client::Client;
use sluice_proto::{Accusation, HostHeartbeat, HostRegistration};

fn accuse(c: &Client, by: u32, host: u32) {
    c.heartbeat(&HostHeartbeat {
        registration: HostRegistration {
            host: by,
            name: format!("h{by}"),
            underlay: std::net::Ipv4Addr::new(10, 255, 0, by as u8),
            api: "http://127.0.0.1:9".into(),
            config_version: 0,
            api_token: None,
            capacity: None,
            api_csr: None,
        },
        instances: Vec::new(),
        chains: Vec::new(),
        accusations: vec![Accusation {
            host,
            rate_bps: 250_000_000,
            allowance_bps: 20_000_000,
            congested_periods: 44,
            age_ms: 0,
        }],
        backend_checks: Vec::new(),
        peers: Vec::new(),
    })
    .unwrap();
}

#[test]
fn an_operator_sees_a_contained_host_and_releases_it() {
    let dir = tempfile::tempdir().unwrap();
    let (_h, url, admin) = common::controller(dir.path());
    let c = Client::new(&url).with_token(Some(&admin));
    common::register_two_hosts(&c);
    accuse(&c, 3, 1);
    let op = |args: &[&str]| {
        let mut v = args.to_vec();
        v.extend(["--controller", &url, "--token", &admin]);
        sluice(&v)
    };
    let (code, out, err) = op(&["get", "containment"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("contained hosts: none (a host is contained once 2 hosts accuse it)"),
        "{out}"
    );
    let row: Vec<&str> = out.lines().nth(2).unwrap().split_whitespace().collect();
    assert_eq!(row, ["1", "3", "250.0", "20.0", "0.0", "yes"], "{out}");
    accuse(&c, 2, 1);
    let (_, out, _) = op(&["get", "containment"]);
    assert!(out.starts_with("contained hosts: 1 "), "{out}");
    let (code, out, err) = op(&["release", "1"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("host 1 released"), "{out}");
    let (_, out, _) = op(&["get", "containment", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["contained"], serde_json::json!([]));
    let (code, _, err) = op(&["release", "9"]);
    assert_ne!(code, 0);
    assert!(err.contains("host 9 is not registered"), "{err}");
}

#[test]
fn an_operator_revokes_a_host_only_when_sure() {
    let dir = tempfile::tempdir().unwrap();
    let (_h, url, admin) = common::controller(dir.path());
    let c = Client::new(&url).with_token(Some(&admin));
    common::register_two_hosts(&c);
    let op = |args: &[&str]| {
        let mut v = args.to_vec();
        v.extend(["--controller", &url, "--token", &admin]);
        sluice(&v)
    };
    let (_, out, _) = op(&["token", "create", "h2-spare", "--role", "host:2"]);
    assert!(out.contains("sluice_"), "{out}");
    // Not on a terminal and without --yes: nothing happens.
    let (code, _, err) = op(&["revoke", "2"]);
    assert_ne!(code, 0);
    assert!(err.contains("--yes"), "{err}");
    assert!(c.containment().unwrap().contained.is_empty());
    let (code, out, err) = op(&["revoke", "2", "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("host 2 revoked") && out.contains("1 token(s) deleted"),
        "{out}"
    );
    assert!(out.contains("--role host:2"), "{out}");
    assert_eq!(c.containment().unwrap().contained, [2]);
    let (_, out, _) = op(&["token", "list"]);
    assert!(!out.contains("h2-spare"), "{out}");
    let (code, _, err) = op(&["revoke", "9", "--yes"]);
    assert_ne!(code, 0);
    assert!(err.contains("host 9 is not registered"), "{err}");
}
