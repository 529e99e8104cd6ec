//! Draining an NF instance over the real API: a tenant drains an instance of
//! its own middlebox and undrains it; another tenant's token is refused
//! (403, audited) and changes nothing; the last instance taking new flows
//! needs `force`; the drain shows in the instance listing, the events, the
//! audit log and the metrics.

mod common;

use sluice_controller::client::Client;

/// a1 on host 1 reaches b1 (host 2) through a shared-state firewall with two
/// instances and a monitor with one.
const SPEC: &str = "tenant: acme
elements:
  a: { type: service, vms: { a1: 10.0.0.1 } }
  b: { type: service, vms: { b1: 10.0.0.2 } }
  fw: { type: middlebox, function: monitor, instances: 2 }
  mon: { type: middlebox, function: monitor }
chains:
  - { name: ab, path: [a, fw, mon, b] }
";

const DRAIN: &str = "/v1/tenants/acme/middleboxes/fw/instances/1/drain";

#[test]
fn a_tenant_drains_its_own_instance_and_another_tenant_cannot() {
    let dir = tempfile::tempdir().unwrap();
    let (server, admin_token) = common::start(dir.path());
    let admin = Client::new(&server.url()).with_token(Some(&admin_token));
    for h in [1, 2] {
        common::register_host(&admin, h, None);
    }
    common::register_vm(&admin, "acme", "a1", 1, "10.0.0.1");
    common::register_vm(&admin, "acme", "b1", 2, "10.0.0.2");
    admin.apply(Some("acme"), SPEC).unwrap();
    let acme_token = admin.create_token("acme-ci", "tenant:acme").unwrap().token;
    let bravo_token = admin
        .create_token("bravo-ci", "tenant:bravo")
        .unwrap()
        .token;
    let base = server.url();
    let state = |c: &Client, name: &str| -> String {
        c.instances()
            .unwrap()
            .into_iter()
            .find(|i| i.name == name)
            .map(|i| i.state)
            .unwrap_or_default()
    };

    // Another tenant's token: 403 naming the token, and nothing changes.
    for m in ["PUT", "DELETE"] {
        let (code, text) = common::call(&base, Some(&bravo_token), m, DRAIN, "");
        assert_eq!(code, 403, "{m}: {text}");
        assert!(text.contains("bravo-ci"), "{text}");
    }
    assert_ne!(state(&admin, "acme/fw/1"), "draining");

    // The tenant drains its own instance.
    let acme = Client::new(&base).with_token(Some(&acme_token));
    let v = acme
        .drain_instance("acme", "fw", 1, Some(60_000), false)
        .unwrap();
    assert_eq!(
        (v.state.as_str(), v.state_mode.as_str(), v.changed),
        ("draining", "shared", true)
    );
    assert!(v.drain_until_ms.is_some());
    assert_eq!(state(&acme, "acme/fw/1"), "draining");
    // The last instance of a middlebox taking new flows needs force.
    match acme.drain_instance("acme", "mon", 0, None, false) {
        Err(sluice_controller::client::ClientError::Api {
            status, message, ..
        }) => {
            assert_eq!(status, 409);
            assert!(message.contains("last instance"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    match acme.drain_instance("acme", "fw", 9, None, false) {
        Err(sluice_controller::client::ClientError::Api {
            status, message, ..
        }) => {
            assert_eq!(status, 404);
            assert!(message.contains("no instance 9"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let ev: Vec<String> = admin
        .events(0)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "drain")
        .map(|e| e.reason)
        .collect();
    assert!(
        ev.iter()
            .any(|e| e.contains("acme/fw/1 drained by an operator")),
        "{ev:?}"
    );
    let (_, metrics) = common::call(&base, Some(&admin_token), "GET", "/metrics", "");
    assert!(
        metrics.contains(
            "sluice_controller_instance_drain{tenant=\"acme\",middlebox=\"fw\",instance=\"acme/fw/1\",state=\"draining\"} 1"
        ),
        "{metrics}"
    );
    let audit = admin.audit(0, Some("acme"), 0).unwrap();
    let who: Vec<(&str, u16)> = audit
        .iter()
        .filter(|a| a.action.starts_with("drain instance acme/fw/1"))
        .map(|a| (a.actor.as_str(), a.status))
        .collect();
    // The refused attempt is recorded too.
    assert_eq!(who, [("bravo-ci", 403), ("acme-ci", 200)], "{audit:?}");

    // Undrained: it takes new flows again.
    let v = acme.undrain_instance("acme", "fw", 1).unwrap();
    assert_eq!((v.state.as_str(), v.changed), ("serving", true));
    assert_ne!(state(&admin, "acme/fw/1"), "draining");
}
