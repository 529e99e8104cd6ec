//! Draining a load-balancer backend over the real API: a tenant drains a
//! backend of its own load balancer and undrains it; another tenant's token
//! is refused (403) and changes nothing; the drain shows in the backends'
//! listing (filtered per tenant), the instances' configuration, the events,
//! the audit log and the metrics.

mod common;

use sluice_controller::client::Client;

/// a1 on host 1 reaches b1 (host 2) and b2 (host 1) behind a load balancer.
const SPEC: &str = "tenant: acme
elements:
  a: { type: service, vms: { a1: 10.0.0.1 } }
  b: { type: service, vms: { b1: 10.0.0.2, b2: 10.0.0.3 } }
  lb:
    type: middlebox
    function: lb
    config:
      services:
        - vip: 10.0.0.100
          port: 80
          backends: [{ addr: \"10.0.0.2\" }, { addr: \"10.0.0.3\" }]
chains:
  - { name: ab, path: [a, lb, b] }
";

const DRAIN: &str = "/v1/tenants/acme/middleboxes/lb/backends/10.0.0.2/drain";

/// The backend states in the configuration of every host running an
/// instance of acme/lb.
fn pushed_states(c: &Client) -> Vec<String> {
    (1..=2)
        .flat_map(|h| c.config(h).unwrap().instances)
        .filter(|i| i.middlebox == "lb")
        .flat_map(|i| i.backends)
        .map(|b| format!("{} {}", b.addr, b.state.as_str()))
        .collect()
}

#[test]
fn a_tenant_drains_its_own_backend_and_another_tenant_cannot() {
    let dir = tempfile::tempdir().unwrap();
    let (server, admin_token) = common::start(dir.path());
    let admin = Client::new(&server.url()).with_token(Some(&admin_token));
    for h in [1, 2] {
        common::register_host(&admin, h, None);
    }
    common::register_vm(&admin, "acme", "a1", 1, "10.0.0.1");
    common::register_vm(&admin, "acme", "b1", 2, "10.0.0.2");
    common::register_vm(&admin, "acme", "b2", 1, "10.0.0.3");
    admin.apply(Some("acme"), SPEC).unwrap();
    let acme_token = admin.create_token("acme-ci", "tenant:acme").unwrap().token;
    let bravo_token = admin
        .create_token("bravo-ci", "tenant:bravo")
        .unwrap()
        .token;
    let base = server.url();
    let up = |c: &Client| -> Vec<(String, String)> {
        c.backends()
            .unwrap()
            .into_iter()
            .map(|b| (b.backend, b.state))
            .collect()
    };
    assert_eq!(
        up(&admin),
        [
            ("10.0.0.2".into(), "up".into()),
            ("10.0.0.3".into(), "up".into())
        ]
    );

    // Another tenant's token: 403, naming the token, and nothing changes.
    let (code, text) = common::call(
        &base,
        Some(&bravo_token),
        "PUT",
        DRAIN,
        "{\"delay_ms\":5000}",
    );
    assert_eq!(code, 403, "{text}");
    assert!(text.contains("bravo-ci"), "{text}");
    let (code, _) = common::call(&base, Some(&bravo_token), "DELETE", DRAIN, "");
    assert_eq!(code, 403);
    assert!(up(&admin).iter().all(|(_, s)| s == "up"));
    assert!(pushed_states(&admin).is_empty());
    // It does not see acme's backends either.
    let bravo = Client::new(&base).with_token(Some(&bravo_token));
    assert!(bravo.backends().unwrap().is_empty());

    // The tenant drains its own backend.
    let acme = Client::new(&base).with_token(Some(&acme_token));
    let after = acme
        .drain_backend("acme", "lb", "10.0.0.2", Some(60_000))
        .unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(
        (
            after[0].state.as_str(),
            after[0].vm.as_deref(),
            after[0].host
        ),
        ("draining", Some("b1"), Some(2))
    );
    assert!(after[0].drain_until_ms.unwrap() > after[0].since_ms + 59_000);
    assert_eq!(pushed_states(&admin), ["10.0.0.2 draining"]);
    assert_eq!(
        up(&acme),
        [
            ("10.0.0.2".into(), "draining".into()),
            ("10.0.0.3".into(), "up".into())
        ]
    );
    let ev: Vec<String> = admin
        .events(0)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "backend")
        .map(|e| e.reason)
        .collect();
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert!(
        ev[0].contains("up -> draining: drained by an operator"),
        "{}",
        ev[0]
    );
    let (_, metrics) = common::call(&base, Some(&admin_token), "GET", "/metrics", "");
    assert!(metrics.contains(
        "sluice_controller_backend_state{tenant=\"acme\",middlebox=\"lb\",backend=\"10.0.0.2\",state=\"draining\"} 1"
    ));
    let audit = admin.audit(0, Some("acme"), 0).unwrap();
    let drains: Vec<_> = audit
        .iter()
        .filter(|a| a.action.starts_with("drain backend 10.0.0.2"))
        .collect();
    // The refused attempt is recorded too.
    let who: Vec<(&str, u16)> = drains
        .iter()
        .map(|a| (a.actor.as_str(), a.status))
        .collect();
    assert_eq!(who, [("bravo-ci", 403), ("acme-ci", 200)], "{audit:?}");

    // Undrained: up again, everywhere.
    let after = acme.undrain_backend("acme", "lb", "10.0.0.2").unwrap();
    assert_eq!(after[0].state, "up");
    assert!(pushed_states(&admin).is_empty());
}
