//! Issue 27, item 4 on a namespace testbed: Figure 4 with its firewall and
//! IPS consolidated into one group (CoMb's hyperapp). Real TCP crosses the
//! group's instances, each running both functions as one pipeline: the
//! firewall's deny, the IPS's block and alert, and the load balancing after
//! them all hold, with no instance of either member of its own. Needs root,
//! nginx, curl and redis-server (scripts/common.sh installs them).

use std::time::{Duration, Instant};

mod common;

use sluice_testbed::lab::Lab;
use sluice_testbed::scenario::curl;

/// Figure 4 with `edge: [fw, ips]`; west-to-b crosses the IPS too, since
/// every chain crossing a group's member crosses the whole group.
fn consolidated_figure4(dir: &std::path::Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(common::figure4_spec()).unwrap();
    let west_b = "path: [clients-west, http, fw, lb-b, web-b]";
    assert!(text.contains(west_b), "figure4.yaml's west-to-b changed");
    let text = text.replace(west_b, "path: [clients-west, http, fw, ips, lb-b, web-b]")
        + "consolidate:\n  - { name: edge, members: [fw, ips] }\n";
    let path = dir.join("figure4-consolidated.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_consolidated_firewall_and_ips_guard_real_traffic_as_one_pipeline() {
    if !sluice_agent::testing::is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec = consolidated_figure4(dir.path());
    let lab = Lab::up(&common::lab_options(spec, dir.path()))
        .unwrap_or_else(|e| panic!("testbed did not come up: {e}"));

    // The controller runs the group as one middlebox of two instances
    // (the firewall asked for two), and nothing of its members alone.
    let edge = common::controller_get(&lab, "/v1/tenants/acme/middleboxes/edge");
    assert_eq!(edge["function"], "hyperapp", "{edge}");
    assert_eq!(
        edge["members"],
        serde_json::json!(["fw:firewall", "ips:ips"]),
        "{edge}"
    );
    assert_eq!(edge["instances"], 2, "{edge}");
    let st = lab.state();
    for mb in ["fw", "ips"] {
        let r = st
            .http()
            .get(&format!(
                "{}/v1/tenants/acme/middleboxes/{mb}",
                st.controller
            ))
            .set("Authorization", &st.bearer())
            .call();
        assert!(
            matches!(r, Err(ureq::Error::Status(404, _))),
            "{mb} still answers as a middlebox of its own: {r:?}"
        );
    }

    // Allowed requests cross the group and the load balancers, both ways.
    let servers = common::web_a_servers(&lab, 16);
    let mut seen: Vec<&str> = servers.iter().map(String::as_str).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen, ["web-a1", "web-a2"], "east to web-a: {servers:?}");
    let b = curl(
        &lab,
        "gateway",
        Some("203.0.113.10"),
        "http://10.10.2.100/index.html",
        5,
    );
    assert!(
        matches!(b.as_deref(), Some(b"web-b1\n") | Some(b"web-b2\n")),
        "west to web-b: {b:?}"
    );

    // The firewall member's deny rule.
    let denied = curl(
        &lab,
        "gateway",
        Some("198.51.100.66"),
        "http://10.10.1.100/index.html",
        3,
    );
    assert!(
        denied.is_none(),
        "the firewall's deny let a request through"
    );

    // The IPS member blocks its signature and reports the alert once, from
    // an instance of the group.
    let blocked = curl(
        &lab,
        "gateway",
        Some("203.0.113.10"),
        "http://10.10.2.100/index.html?f=/etc/passwd",
        3,
    );
    assert!(blocked.is_none(), "the IPS let its signature through");
    let alerts = |lab: &Lab| -> Vec<serde_json::Value> {
        common::controller_get(lab, "/v1/alerts?tenant=acme")
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|a| a["alert"]["signature_id"] == 1_000_001)
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = alerts(&lab);
    while got.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        got = alerts(&lab);
    }
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["alert"]["action"], "blocked", "{}", got[0]);
    assert!(
        got[0]["host"]
            .as_str()
            .is_some_and(|h| h.starts_with("acme/edge/")),
        "{}",
        got[0]
    );
    // And the same request without the signature still works afterwards
    // (the block was the IPS's, not a broken path).
    let ok = curl(
        &lab,
        "gateway",
        Some("203.0.113.10"),
        "http://10.10.2.100/index.html",
        5,
    );
    assert!(ok.is_some(), "west to web-b after the block");
}
