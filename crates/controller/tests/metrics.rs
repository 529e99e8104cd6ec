//! `GET /metrics` on a real server: what it reports about hosts, tenants and
//! instances, who may read it (it names every tenant), and that Prometheus's
//! own linter (`promtool check metrics`, Debian's `prometheus` package)
//! accepts it.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use sluice_controller::client::Client;

mod common;

const SPEC: &str = "tenant: t
elements:
  a: { type: service, vms: { a1: 10.0.0.1 } }
  b: { type: service, vms: { b1: 10.0.0.2 } }
  mon: { type: middlebox, function: monitor, instances: 2 }
chains:
  - { name: ab, path: [a, mon, b] }
";

fn note(line: &str) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("test-notes");
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(dir.join("controller-metrics.txt"), format!("{line}\n"));
    eprintln!("{line}");
}

/// `promtool check metrics` on `text`: None if promtool is not installed,
/// else its complaints (empty: none).
pub fn promtool(text: &str) -> Option<String> {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("promtool");
    let complaints = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Some(String::new())
    } else {
        Some(complaints)
    }
}

fn get(url: &str, token: Option<&str>) -> (u16, String) {
    let mut req = ureq::get(&format!("{url}/metrics"));
    if let Some(t) = token {
        req = req.set("Authorization", &format!("Bearer {t}"));
    }
    match req.call() {
        Ok(r) => (r.status(), r.into_string().unwrap()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap()),
        Err(e) => panic!("GET /metrics: {e}"),
    }
}

#[test]
fn metrics_describe_the_deployment_to_monitoring_only_and_pass_promtool() {
    let dir = tempfile::tempdir().unwrap();
    let (h, admin) = common::start(dir.path());
    let url = h.url();
    let c = Client::new(&url).with_token(Some(&admin));
    // Nothing listens at the hosts' API addresses: every push fails, and is counted.
    for host in 1..=2u32 {
        common::register_host(&c, host, None);
    }
    for (name, host, addr) in [("a1", 1, "10.0.0.1"), ("b1", 2, "10.0.0.2")] {
        common::register_vm(&c, "t", name, host, addr);
    }
    c.apply(None, SPEC).unwrap();
    let reader = c.create_token("prometheus", "read-only").unwrap().token;
    let tenant = c.create_token("t-user", "tenant:t").unwrap().token;

    // Pushes to the hosts' dead API fail; wait until at least one is counted.
    for _ in 0..100 {
        let (code, body) = get(&url, Some(&reader));
        assert_eq!(code, 200, "{body}");
        if !body.contains("sluice_controller_pushes_total{result=\"error\"} 0") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // A heartbeat just before the last read: on a loaded machine the wait
    // above can outlast the hosts' silence threshold, and they would read
    // as down.
    for host in 1..=2u32 {
        common::register_host(&c, host, None);
    }
    let text = get(&url, Some(&reader)).1;
    assert!(
        text.contains("sluice_controller_host_up{host=\"h1\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("sluice_controller_host_up{host=\"h2\"} 1"),
        "{text}"
    );
    assert!(text.contains("sluice_controller_tenants 1"), "{text}");
    assert!(
        text.contains(
            "sluice_controller_instances{tenant=\"t\",middlebox=\"mon\",state=\"placed\"} 2"
        ),
        "{text}"
    );
    // The chain's hops, to join the instances' per-middlebox histograms on.
    assert!(
        text.contains(
            "sluice_controller_chain_hop_info{tenant=\"t\",chain=\"ab\",hop=\"1\",middlebox=\"mon\"} 1"
        ),
        "{text}"
    );
    assert!(
        !text.contains("sluice_controller_pushes_total{result=\"error\"} 0"),
        "failed pushes counted: {text}"
    );
    assert!(text.contains("sluice_controller_push_duration_seconds_bucket{le=\"+Inf\"}"));
    assert!(
        text.contains("# TYPE sluice_controller_events_total counter"),
        "{text}"
    );
    assert!(text.contains("process_resident_memory_bytes "), "{text}");
    assert!(text.contains("process_cpu_seconds_total "), "{text}");

    // It names every tenant: not for a tenant's token, nor for no token.
    assert_eq!(get(&url, Some(&tenant)).0, 403);
    assert_eq!(get(&url, None).0, 401);

    match promtool(&text) {
        None => note(
            "controller metrics: promtool not installed (Debian's prometheus package), not linted",
        ),
        Some(complaints) => assert!(complaints.is_empty(), "promtool: {complaints}\n{text}"),
    }
    h.shutdown();
}

/// deploy/'s Prometheus configuration and alerting rules are what promtool
/// accepts, and every Sluice metric the rules use is one the controller or the
/// agents export (a renamed metric cannot leave a rule that never fires).
#[test]
fn the_example_scrape_config_and_alert_rules_are_valid_and_use_real_metrics() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let rules_path = root.join("deploy/sluice-alerts.yml");
    let rules = std::fs::read_to_string(&rules_path).unwrap();
    let exported = [
        "crates/controller/src/metrics.rs",
        "crates/agent/src/control.rs",
    ]
    .map(|f| std::fs::read_to_string(root.join(f)).unwrap())
    .join("\n");
    let mut used = 0;
    for word in rules.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if word.starts_with("sluice_") {
            used += 1;
            assert!(
                exported.contains(&format!("\"{word}")),
                "deploy/sluice-alerts.yml uses {word}, which nothing exports"
            );
        }
    }
    assert!(used >= 5, "the rules use Sluice's metrics");
    let promtool = |args: &[&str]| Command::new("promtool").args(args).output();
    let Ok(out) = promtool(&["check", "rules", rules_path.to_str().unwrap()]) else {
        note("deploy/: promtool not installed, the example configuration not checked");
        return;
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let config = root.join("deploy/prometheus.yml");
    // --syntax-only: the token file it names exists only on a Prometheus host.
    let out = promtool(&["check", "config", "--syntax-only", config.to_str().unwrap()]).unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The example Grafana dashboard is a dashboard (panels with queries), every
/// Sluice metric its queries use is one the controller or the agents export,
/// and every query is PromQL that promtool accepts (each checked as a
/// recording rule).
#[test]
fn the_example_grafana_dashboard_queries_real_metrics() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read_to_string(root.join("deploy/grafana/sluice.json")).unwrap();
    let d: serde_json::Value = serde_json::from_str(&text).unwrap();
    let exported = [
        "crates/controller/src/metrics.rs",
        "crates/agent/src/control.rs",
    ]
    .map(|f| std::fs::read_to_string(root.join(f)).unwrap())
    .join("\n");
    let panels = d["panels"].as_array().expect("panels");
    let mut ids = std::collections::HashSet::new();
    let mut exprs = Vec::new();
    for p in panels {
        assert!(
            ids.insert(p["id"].as_u64().unwrap()),
            "panel ids are unique"
        );
        let targets = p["targets"].as_array().expect("every panel queries");
        assert!(!targets.is_empty(), "{}", p["title"]);
        for t in targets {
            exprs.push(t["expr"].as_str().unwrap().to_string());
        }
    }
    assert!(exprs.len() >= 10, "the dashboard shows the service");
    for e in &exprs {
        for word in e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if !word.starts_with("sluice_") {
                continue;
            }
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| word.strip_suffix(s))
                .unwrap_or(word);
            assert!(
                exported.contains(&format!("\"{family}")),
                "deploy/grafana/sluice.json uses {word}, which nothing exports"
            );
        }
    }
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (k, e) in exprs.iter().enumerate() {
        rules.push_str(&format!(
            "      - record: dashboard:q{k}\n        expr: '{e}'\n"
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dashboard-queries.yml");
    std::fs::write(&path, rules).unwrap();
    let Ok(out) = Command::new("promtool")
        .args(["check", "rules", path.to_str().unwrap()])
        .output()
    else {
        note("deploy/grafana: promtool not installed, the queries' syntax not checked");
        return;
    };
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
