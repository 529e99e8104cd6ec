//! `sluice block`, `sluice get blocks` and `sluice unblock` against a
//! controller on loopback, with a tenant's token (the tenant is then implied)
//! and the operator's (which names it).

mod common;
use common::sluice;

use serde_json::Value;
use sluice_controller::client::Client;

#[test]
fn a_tenant_blocks_lists_and_unblocks_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let (_h, url, admin) = common::controller(dir.path());
    let c = Client::new(&url).with_token(Some(&admin));
    common::register_two_hosts(&c);
    c.apply(Some("t"), common::SPEC).unwrap();
    let other = "tenant: u\nelements:\n  x: { type: service, vms: { x1: 10.9.0.1 } }\nchains: []\n";
    c.register_vm(&sluice_proto::VmRegistration {
        tenant: "u".into(),
        name: "x1".into(),
        host: 1,
        iface: "veth-x1".into(),
        mac: "02:00:00:00:00:09".into(),
        addr: "10.9.0.1".parse().unwrap(),
        gateway: false,
    })
    .unwrap();
    c.apply(Some("u"), other).unwrap();
    let tok = c.create_token("t-ci", "tenant:t").unwrap().token;
    let as_t = |args: &[&str]| {
        let mut v = args.to_vec();
        v.extend(["--controller", &url, "--token", &tok]);
        sluice(&v)
    };
    let as_op = |args: &[&str]| {
        let mut v = args.to_vec();
        v.extend(["--controller", &url, "--token", &admin]);
        sluice(&v)
    };

    // The tenant's token sees one tenant: no --tenant needed.
    let (code, out, err) = as_t(&["block", "b1", "--from", "a1", "--comment", "noisy"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("block 1: traffic from 10.0.0.1/32 to t/b1"),
        "{out}"
    );
    assert!(out.contains("host 1") && out.contains("host 2"), "{out}");
    let (code, out, err) = as_t(&["block", "b1", "--from", "198.51.100.0/24", "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["id"].as_u64(), v["prefix"].as_str()),
        (Some(2), Some("198.51.100.0/24"))
    );

    let (code, out, err) = as_t(&["get", "blocks"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("BLOCKING"),
        "{out}"
    );
    assert!(lines[1].contains("a1") && lines[1].contains("t-ci") && lines[1].contains("noisy"));
    assert!(lines[2].contains("198.51.100.0/24"), "{out}");

    // Bad input: the controller's words.
    let (code, _, err) = as_t(&["block", "nobody", "--from", "a1"]);
    assert_ne!(code, 0);
    assert!(err.contains("no VM `nobody`"), "{err}");
    // The operator sees two tenants: it must name one to block...
    let (code, _, err) = as_op(&["block", "b1", "--from", "a1"]);
    assert_ne!(code, 0);
    assert!(err.contains("--tenant") && err.contains("t, u"), "{err}");
    // ...but lists every tenant's blocks, and finds a block's tenant itself.
    let (code, out, _) = as_op(&["get", "blocks", "-o", "json"]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 2);
    let (code, out, err) = as_op(&["unblock", "1"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("removed block 1: traffic from 10.0.0.1/32 to t/b1 flows again"),
        "{out}"
    );
    let (code, _, err) = as_t(&["unblock", "1"]);
    assert_ne!(code, 0);
    assert!(err.contains("holds block 1"), "{err}");
    let (code, out, err) = as_t(&["unblock", "2", "--tenant", "t"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("198.51.100.0/24"), "{out}");
    let (code, out, _) = as_t(&["get", "blocks", "--tenant", "t", "-o", "json"]);
    assert_eq!((code, out.trim()), (0, "[]"));
}
