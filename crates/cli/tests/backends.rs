//! `sluice drain backend`, `sluice get backends`, `sluice status` and `sluice
//! undrain backend` against a controller on loopback.

mod common;
use common::sluice;

use sluice_controller::client::Client;

const SPEC: &str = "tenant: t
elements:
  a: { type: service, vms: { a1: 10.0.0.1 } }
  b: { type: service, vms: { b1: 10.0.0.2 } }
  lb:
    type: middlebox
    function: lb
    config:
      services:
        - { vip: 10.0.0.100, port: 80, backends: [{ addr: \"10.0.0.2:8080\" }] }
chains:
  - { name: ab, path: [a, lb, b] }
";

#[test]
fn an_operator_drains_and_undrains_a_backend_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let (_h, url, admin) = common::controller(dir.path());
    let c = Client::new(&url).with_token(Some(&admin));
    common::register_two_hosts(&c);
    c.apply(Some("t"), SPEC).unwrap();
    let run = |args: &[&str]| {
        let mut v = args.to_vec();
        v.extend(["--controller", &url, "--token", &admin]);
        sluice(&v)
    };
    let (code, out, err) = run(&["get", "backends"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("10.0.0.2:8080") && out.contains(" up "),
        "{out}"
    );

    let (code, out, err) = run(&["drain", "backend", "t", "lb", "10.0.0.2", "--delay", "90s"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("draining") && out.contains("b1"), "{out}");
    let (_, out, _) = run(&["status"]);
    assert!(
        out.contains("load-balancer backends: 1, 0 up")
            && out.contains("t/lb 10.0.0.2:8080")
            && out.contains("DRAINING (removed in "),
        "{out}"
    );
    let (code, out, _) = run(&["get", "backends", "-o", "json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[0]["state"], "draining");

    // A bad delay is a usage error naming it; an unknown backend the controller's 404.
    let (code, _, err) = run(&["drain", "backend", "t", "lb", "10.0.0.2", "--delay", "5h"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unknown unit"), "{err}");
    let (code, _, err) = run(&["drain", "backend", "t", "lb", "10.0.0.9"]);
    assert_eq!(code, 1);
    assert!(err.contains("has no backend `10.0.0.9`"), "{err}");

    let (code, out, err) = run(&["undrain", "backend", "t", "lb", "10.0.0.2:8080"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(" up "), "{out}");
}
