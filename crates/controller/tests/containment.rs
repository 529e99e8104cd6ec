//! Seawall §4's containment over HTTP, with each host's own token: a host
//! accused by fewer than `f` = 2 hosts stays; a host cannot accuse in another
//! host's name (403, nothing recorded); two distinct accusers contain it;
//! tenants cannot read the containment state; only an operator releases,
//! and accusations made before the release no longer count.

use serde_json::Value;
use sluice_controller::client::Client;

mod common;
use common::call;

fn beat(id: u32, accused: &[u32]) -> String {
    let acc: Vec<Value> = accused
        .iter()
        .map(|a| serde_json::json!({ "host": a, "rate_bps": 300_000_000u64, "allowance_bps": 15_000_000u64, "congested_periods": 60 }))
        .collect();
    serde_json::json!({
        "host": id,
        "name": format!("h{id}"),
        "underlay": format!("10.255.0.{id}"),
        "api": "http://127.0.0.1:9",
        "accusations": acc,
    })
    .to_string()
}

fn state(base: &str, admin: &str) -> Value {
    let (code, text) = call(base, Some(admin), "GET", "/v1/containment", "");
    assert_eq!(code, 200, "{text}");
    serde_json::from_str(&text).unwrap()
}

#[test]
fn a_host_is_contained_only_by_enough_honest_accusers_and_released_by_an_operator() {
    let dir = tempfile::tempdir().unwrap();
    let (server, admin) = common::start(dir.path());
    let base = server.url();
    let c = Client::new(&base).with_token(Some(&admin));
    let hosts: Vec<String> = (1..=4)
        .map(|h| {
            c.create_token(&format!("h{h}"), &format!("host:{h}"))
                .unwrap()
                .token
        })
        .collect();
    let tenant = c.create_token("acme", "tenant:acme").unwrap().token;
    let reader = c.create_token("ro", "read-only").unwrap().token;
    for (i, t) in hosts.iter().enumerate() {
        let id = i as u32 + 1;
        assert_eq!(
            call(&base, Some(t), "POST", "/v1/hosts", &beat(id, &[])).0,
            200
        );
    }
    // Host 4 (subverted, say) accuses host 1: one accuser is not enough.
    let (code, text) = call(&base, Some(&hosts[3]), "POST", "/v1/hosts", &beat(4, &[1]));
    assert_eq!(code, 200, "{text}");
    let s = state(&base, &admin);
    assert_eq!(s["contained"], serde_json::json!([]));
    assert_eq!(s["accusations"][0]["host"], 1);
    assert_eq!(s["accusations"][0]["by"], 4);
    assert_eq!(s["threshold"], 2);
    // It cannot add a second voice in host 2's or 3's name.
    for other in [2, 3] {
        let (code, text) = call(
            &base,
            Some(&hosts[3]),
            "POST",
            "/v1/hosts",
            &beat(other, &[1]),
        );
        assert_eq!(code, 403, "{text}");
    }
    // Nor accuse itself into counting twice, nor name an unregistered host.
    call(
        &base,
        Some(&hosts[3]),
        "POST",
        "/v1/hosts",
        &beat(4, &[1, 4, 77]),
    );
    let s = state(&base, &admin);
    assert_eq!(s["contained"], serde_json::json!([]), "{s}");
    assert_eq!(s["accusations"].as_array().unwrap().len(), 1, "{s}");
    // Tenants do not see hosts' troubles; read-only tokens do.
    assert_eq!(
        call(&base, Some(&tenant), "GET", "/v1/containment", "").0,
        403
    );
    assert_eq!(
        call(&base, Some(&reader), "GET", "/v1/containment", "").0,
        200
    );

    // An honest second accuser: host 1 is contained.
    call(&base, Some(&hosts[1]), "POST", "/v1/hosts", &beat(2, &[1]));
    let s = state(&base, &admin);
    assert_eq!(s["contained"], serde_json::json!([1]), "{s}");
    let (_, metrics) = call(&base, Some(&admin), "GET", "/metrics", "");
    assert!(
        metrics.contains("sluice_controller_host_contained{host=\"h1\"} 1"),
        "{metrics}"
    );
    let (_, events) = call(&base, Some(&admin), "GET", "/v1/events?kind=contained", "");
    assert!(events.contains("host 1 contained"), "{events}");

    // Only an operator releases it.
    for t in [&reader, &tenant, &hosts[1]] {
        assert_eq!(
            call(&base, Some(t), "DELETE", "/v1/hosts/1/containment", "").0,
            403
        );
    }
    let (code, text) = call(&base, Some(&admin), "DELETE", "/v1/hosts/1/containment", "");
    assert_eq!(code, 200, "{text}");
    assert!(text.contains("\"released\":true"), "{text}");
    // The same standing accusations do not contain it again.
    call(&base, Some(&hosts[1]), "POST", "/v1/hosts", &beat(2, &[1]));
    call(&base, Some(&hosts[3]), "POST", "/v1/hosts", &beat(4, &[1]));
    let s = state(&base, &admin);
    assert_eq!(s["contained"], serde_json::json!([]), "{s}");
    assert!(s["accusations"]
        .as_array()
        .unwrap()
        .iter()
        .all(|a| a["counts"] == false));
    // Withdrawn and made anew by two hosts, they do.
    call(&base, Some(&hosts[1]), "POST", "/v1/hosts", &beat(2, &[]));
    call(&base, Some(&hosts[2]), "POST", "/v1/hosts", &beat(3, &[]));
    call(&base, Some(&hosts[1]), "POST", "/v1/hosts", &beat(2, &[1]));
    call(&base, Some(&hosts[2]), "POST", "/v1/hosts", &beat(3, &[1]));
    assert_eq!(state(&base, &admin)["contained"], serde_json::json!([1]));
}
