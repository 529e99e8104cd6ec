//! Placement against the capacity hosts declare, on a real server: an apply
//! that cannot fit is refused with a 409 problem naming the middlebox, the
//! instances wanted and what each host has left, and nothing is placed; a
//! scale beyond capacity is refused the same way, with an event; the hosts
//! list shows the slots used.

use std::path::Path;

use serde_json::Value;
use sluice_controller::client::Client;
use sluice_controller::model::ScaleRequest;
use sluice_controller::ServerHandle;
use sluice_proto::HostCapacity;

mod common;
use common::register_vm;

fn start(dir: &Path) -> (ServerHandle, Client, String) {
    let (server, admin) = common::start(dir);
    let c = Client::new(&server.url()).with_token(Some(&admin));
    (server, c, admin)
}

/// Registers host `id` offering `slots` instance slots, in `rack` if given.
fn register_with(c: &Client, id: u32, slots: u32, rack: Option<&str>) {
    let capacity = HostCapacity {
        instance_slots: Some(slots),
        rack: rack.map(str::to_string),
        ..HostCapacity::default()
    };
    common::register_host(c, id, Some(capacity));
}

fn register(c: &Client, id: u32, slots: u32) {
    register_with(c, id, slots, None);
}

fn spec(mon: &str) -> String {
    format!(
        "tenant: acme
elements:
  web: {{ type: service, vms: {{ w1: 10.0.0.1 }} }}
  db: {{ type: service, vms: {{ d1: 10.0.0.2 }} }}
  mon: {{ type: middlebox, function: monitor, {mon} }}
chains:
  - {{ name: a, path: [web, mon, db] }}
"
    )
}

/// `PUT path` with a YAML body; the status and the body as JSON.
fn put(base: &str, token: &str, path: &str, body: &str) -> (u16, Value) {
    let r = ureq::put(&format!("{base}{path}"))
        .set("Authorization", &format!("Bearer {token}"))
        .set("Content-Type", "application/yaml")
        .send_string(body);
    let resp = match r {
        Ok(resp) => resp,
        Err(ureq::Error::Status(_, resp)) => resp,
        Err(e) => panic!("PUT {path}: {e}"),
    };
    let status = resp.status();
    (
        status,
        serde_json::from_str(&resp.into_string().unwrap()).unwrap(),
    )
}

#[test]
fn an_apply_that_cannot_fit_is_refused_naming_what_is_missing_and_places_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (server, c, admin) = start(dir.path());
    register(&c, 1, 1);
    register(&c, 2, 4);
    for (name, host, addr) in [("w1", 1, "10.0.0.1"), ("d1", 2, "10.0.0.2")] {
        register_vm(&c, "acme", name, host, addr);
    }

    // Three instances, one per host, on two hosts: refused.
    let (status, v) = put(
        &server.url(),
        &admin,
        "/v1/tenants/acme",
        &spec("instances: 3, anti_affinity: required"),
    );
    assert_eq!(status, 409, "{v}");
    assert_eq!(v["type"], "https://sluice.dev/problems/conflict");
    let detail = v["detail"].as_str().unwrap();
    for part in [
        "middlebox `mon` of tenant `acme` needs 3 new instances of 1 slot",
        "only 2 fit",
        "free: h1 1 slot; h2 4 slots",
        "anti-affinity: required",
    ] {
        assert!(detail.contains(part), "{part:?} not in {detail}");
    }
    assert_eq!(v["shortfall"]["middlebox"], "mon");
    assert_eq!(v["shortfall"]["wanted"], 3);
    assert_eq!(v["shortfall"]["placed"], 2);
    // Nothing changed.
    assert!(c.instances().unwrap().is_empty());
    assert!(c.tenant("acme").is_err(), "the tenant was not applied");

    // Two fit, one on each host; h1 is then full.
    let (status, v) = put(
        &server.url(),
        &admin,
        "/v1/tenants/acme",
        &spec("instances: 2, anti_affinity: required"),
    );
    assert_eq!(status, 201, "{v}");
    let mut on: Vec<u32> = c.instances().unwrap().iter().map(|i| i.host).collect();
    on.sort();
    assert_eq!(on, [1, 2]);
    let slots: Vec<(u32, Option<u32>)> = c
        .hosts()
        .unwrap()
        .iter()
        .map(|h| (h.slots_used, h.slots_total))
        .collect();
    assert_eq!(slots, [(1, Some(1)), (1, Some(4))]);

    // A third by the scale API: refused, with an event; still two.
    let e = c
        .scale(
            "acme",
            "mon",
            &ScaleRequest {
                instances: 3,
                drain_timeout_ms: None,
            },
        )
        .unwrap_err();
    assert!(e.to_string().contains("needs 1 new instance"), "{e}");
    assert_eq!(c.instances().unwrap().len(), 2);
    let events = c.events(0).unwrap();
    let refused = events
        .iter()
        .find(|e| e.kind == "error" && e.middlebox.as_deref() == Some("mon"))
        .expect("an event says the scale was refused");
    assert!(
        refused.reason.contains("scale to 3 instances refused"),
        "{}",
        refused.reason
    );
}

fn register_in(c: &Client, id: u32, rack: &str) {
    register_with(c, id, 4, Some(rack));
}

/// Hosts in two racks: each tenant's middlebox instances land in the rack of
/// its VMs, and `GET /v1/placement` says where and why; a tenant's token sees
/// its own instances only.
#[test]
fn rack_aware_placement_follows_the_vms_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let (server, c, admin) = start(dir.path());
    register_in(&c, 1, "r1");
    register_in(&c, 2, "r1");
    register_in(&c, 3, "r2");
    register_in(&c, 4, "r2");
    assert_eq!(
        c.hosts()
            .unwrap()
            .iter()
            .map(|h| h.rack.clone().unwrap())
            .collect::<Vec<_>>(),
        ["r1", "r1", "r2", "r2"]
    );
    // acme's VMs in rack r2, beta's in rack r1.
    register_vm(&c, "acme", "w1", 3, "10.0.0.1");
    register_vm(&c, "acme", "d1", 4, "10.0.0.2");
    register_vm(&c, "beta", "w1", 1, "10.0.0.1");
    register_vm(&c, "beta", "d1", 1, "10.0.0.2");
    let (status, v) = put(
        &server.url(),
        &admin,
        "/v1/tenants/acme",
        &spec("instances: 2"),
    );
    assert_eq!(status, 201, "{v}");
    let beta = spec("instances: 1").replace("tenant: acme", "tenant: beta");
    let (status, v) = put(&server.url(), &admin, "/v1/tenants/beta", &beta);
    assert_eq!(status, 201, "{v}");

    let all = c.placement(None).unwrap();
    assert_eq!(all.len(), 3, "{all:?}");
    let acme: Vec<_> = all.iter().filter(|p| p.tenant == "acme").collect();
    let mut hosts: Vec<u32> = acme.iter().map(|p| p.host).collect();
    hosts.sort();
    assert_eq!(hosts, [3, 4], "in rack r2, one per host: {acme:?}");
    for p in &acme {
        assert_eq!(p.rack.as_deref(), Some("r2"));
        assert_eq!(p.policy.as_deref(), Some("rack-aware"));
        assert!(
            p.reason
                .contains("rack r2 holds 2 of the chains' 2 VM endpoints"),
            "{}",
            p.reason
        );
    }
    let b = all.iter().find(|p| p.tenant == "beta").unwrap();
    assert_eq!(
        (b.host_name.as_str(), b.rack.as_deref()),
        ("h1", Some("r1"))
    );

    // One tenant by query; a tenant's token sees its own only, whatever it asks.
    let only = c.placement(Some("beta")).unwrap();
    assert_eq!(only.len(), 1);
    assert_eq!(only[0].name, "beta/mon/0");
    let secret = c.create_token("beta-ops", "tenant:beta").unwrap().token;
    let t = Client::new(&server.url()).with_token(Some(&secret));
    let seen = t.placement(None).unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].tenant, "beta");
    assert!(t.placement(Some("acme")).unwrap().is_empty());
    // A query it does not know is a 400 naming it.
    let e = c.get_raw("/v1/placement?tenantt=acme").unwrap_err();
    assert!(e.to_string().contains("tenantt=acme"), "{e}");
}
