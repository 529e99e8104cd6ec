//! End to end: the Figure 4 tenant on three hosts of a namespace testbed, with
//! real TCP (nginx serving, curl fetching) through the agents, NF instance
//! processes, the controller and Redis. Needs root, nginx, curl, tshark, ethtool
//! and redis-server (scripts/common.sh installs them).

use std::path::PathBuf;

mod common;

use sluice_testbed::lab::{Lab, LabOptions, StoreKind};
use sluice_testbed::scenario;

fn spec() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/tenant/figure4.yaml"
    ))
}

/// Figure 4 with the firewall `state: cached` (ownership leases, the flow
/// cache), written into `dir`; returns its path and text.
fn cached_figure4(dir: &std::path::Path) -> (PathBuf, String) {
    // The monitor exports a flow 3 s after its last packet rather than 120,
    // so the test's flows are reported while it waits.
    let base = std::fs::read_to_string(spec()).unwrap().replace(
        "mon: { type: middlebox, function: monitor }",
        "mon: { type: middlebox, function: monitor, config: { idle_timeout_secs: 3 } }",
    );
    assert!(
        base.contains("idle_timeout_secs: 3"),
        "figure4.yaml's mon changed"
    );
    // And in west-to-b's path, after the LB, so that the monitor sees both
    // directions of a download there.
    let base = base.replace(
        "path: [clients-west, http, fw, lb-b, web-b]",
        "path: [clients-west, http, fw, lb-b, mon, web-b]",
    );
    assert!(
        base.contains("lb-b, mon, web-b"),
        "figure4.yaml's west-to-b changed"
    );
    let text =
        sluice_testbed::elasticity::variant_spec(&base, "fw", "cached", "hash", None).unwrap();
    let path = dir.join("figure4-cached.yaml");
    std::fs::write(&path, &text).unwrap();
    (path, text)
}

/// With the firewall `state: cached`, so the leases and the flow cache are
/// part of it: granted before the traffic, lapsing while the controller is
/// down, kept by a restarted controller.
#[test]
fn figure4_on_three_hosts_with_real_http() {
    let dir = tempfile::tempdir().unwrap();
    let (spec_path, text) = cached_figure4(dir.path());
    let mut lab = Lab::up(&common::lab_options(spec_path, dir.path()))
        .unwrap_or_else(|e| panic!("testbed did not come up: {e}"));
    let report = scenario::figure4(&lab).unwrap();
    let failed: Vec<String> = report
        .checks
        .iter()
        .filter(|c| !c.ok)
        .map(|c| format!("{}: {}", c.name, c.detail))
        .collect();
    if !failed.is_empty() {
        // Keep the evidence in the test output.
        for f in [
            "controller.log",
            "agent-h1.log",
            "agent-h2.log",
            "agent-h3.log",
        ] {
            let t = std::fs::read_to_string(dir.path().join(f)).unwrap_or_default();
            let tail: Vec<&str> = t.lines().rev().take(20).collect();
            eprintln!("--- {f} (last lines, newest first)\n{}", tail.join("\n"));
        }
    }
    assert!(failed.is_empty(), "failed checks:\n{}", failed.join("\n"));
    // The lab's store requires authentication: the traffic above went through
    // instances connected as acme's own store user, and nothing gets in without.
    let store = lab.state().store.clone();
    let mut admin = sluice_state_redis::acl::Admin::open(&store).unwrap();
    assert_eq!(admin.tenant_users().unwrap(), ["sluice-t-acme"]);
    let port = store
        .split('?')
        .next()
        .and_then(|b| b.rsplit(':').next())
        .unwrap();
    // It speaks TLS only: plain text gets nothing, not even an error reply.
    assert!(store.starts_with("rediss://"), "{store}");
    let plain = sluice_state_redis::RedisStore::open(&format!("redis://127.0.0.1:{port}"));
    assert!(plain.is_err(), "the store answered plain text");
    // Over TLS, trusting the lab's CA, still nothing without a user.
    let ca = store
        .split("ca_file=")
        .nth(1)
        .unwrap()
        .split('&')
        .next()
        .unwrap();
    let e =
        sluice_state_redis::RedisStore::open(&format!("rediss://127.0.0.1:{port}?ca_file={ca}"))
            .err()
            .expect("no anonymous access")
            .to_string();
    assert!(e.contains("NOAUTH"), "{e}");
    assert!(
        report
            .checks
            .iter()
            .any(|c| c.name.contains("sluice alerts") && c.ok),
        "the alert check ran"
    );
    assert!(
        report.checks.iter().any(|c| c.name.contains("leases")),
        "the lease check ran too: {:?}",
        report.checks.iter().map(|c| c.name).collect::<Vec<_>>()
    );

    flows_count_the_download_and_know_the_alert(&lab);
    a_fabric_key_rotation_drops_nothing(&lab);

    // Auth is on: the agents registered with their own host tokens (0600
    // files), and the lab's CLI context reaches the controller.
    use std::os::unix::fs::PermissionsExt;
    for f in ["admin.token", "h1.token", "h2.token", "h3.token"] {
        let mode = std::fs::metadata(dir.path().join(f))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{f}");
    }
    let (code, out, err) = common::sluice_env(
        &["status"],
        &[("SLUICE_CONFIG", lab.state().config.to_str().unwrap())],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("3 registered, 3 alive"), "{out}");
    // The API is TLS under the lab controller's own CA: a client without it
    // gets no answer at all, one with it but no token a 401.
    let tenant_url = format!("{}/v1/tenants/acme", lab.state().controller);
    assert!(tenant_url.starts_with("https://"), "{tenant_url}");
    let untrusted = ureq::get(&tenant_url).call();
    assert!(
        matches!(untrusted, Err(ureq::Error::Transport(_))),
        "{untrusted:?}"
    );
    let anonymous = lab.state().http().get(&tenant_url).call();
    assert!(matches!(anonymous, Err(ureq::Error::Status(401, _))));

    // The data plane keeps forwarding while the controller is down: new
    // connections through every middlebox of the chain still work.
    let before = hosts(&lab);
    lab.kill_controller();
    for _ in 0..5 {
        let body = scenario::curl(
            &lab,
            "gateway",
            Some("198.51.100.10"),
            "http://10.10.1.100/index.html",
            5,
        );
        assert!(
            matches!(body.as_deref(), Some(b"web-a1\n") | Some(b"web-a2\n")),
            "with the controller down: {body:?}"
        );
    }
    // A restarted controller carries on from its database: same hosts, the
    // agents in sync without a new version, instances alive.
    lab.restart_controller().unwrap();
    lab.wait_in_sync(std::time::Duration::from_secs(20))
        .unwrap();
    let resp = lab
        .state()
        .http()
        .put(&format!("{}/v1/tenants/acme", lab.state().controller))
        .set("Authorization", &lab.state().bearer())
        .set("Content-Type", "application/yaml")
        .send_string(&text)
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        hosts(&lab),
        before,
        "re-applying the same spec after a restart changed versions"
    );
    let body = scenario::curl(
        &lab,
        "gateway",
        Some("203.0.113.10"),
        "http://10.10.2.100/index.html",
        5,
    );
    assert!(body.is_some(), "traffic after the controller restart");
}

/// Sum of `sluice_agent_drops_total{reason="auth_failed"}` over the agents.
fn auth_failed_drops(lab: &Lab) -> u64 {
    agents_sum(lab, "sluice_agent_drops_total{", "reason=\"auth_failed\"")
}

/// Sum over the agents' metrics of the samples whose line starts with
/// `family` and contains `with`.
fn agents_sum(lab: &Lab, family: &str, with: &str) -> u64 {
    lab.state()
        .hosts
        .iter()
        .map(|h| common::agent_sum(lab, h, family, with))
        .sum()
}

/// `sluice rotate fabric-key` while new connections cross hosts: every one
/// gets its page, every agent ends up sealing with key 2, and no agent
/// refused a datagram for its key.
fn a_fabric_key_rotation_drops_nothing(lab: &Lab) {
    let env = [("SLUICE_CONFIG", lab.state().config.to_str().unwrap())];
    let (code, out, err) = common::sluice_env(&["get", "fabric"], &env);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "fabric: sealed with key 1");
    let refused_before = auth_failed_drops(lab);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (ok, failed) = std::thread::scope(|sc| {
        let traffic = sc.spawn(|| {
            let (mut ok, mut failed) = (0, 0);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || ok + failed < 10 {
                // gateway on host 1, the web-a VIP's backends on the others.
                let body = scenario::curl(
                    lab,
                    "gateway",
                    Some("198.51.100.10"),
                    "http://10.10.1.100/index.html",
                    5,
                );
                match body.as_deref() {
                    Some(b"web-a1\n") | Some(b"web-a2\n") => ok += 1,
                    _ => failed += 1,
                }
            }
            (ok, failed)
        });
        let (code, out, err) =
            common::sluice_env(&["rotate", "fabric-key", "--yes", "--wait", "30s"], &env);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(code, 0, "{out}{err}");
        assert_eq!(out.trim(), "fabric: sealed with key 2", "{err}");
        traffic.join().unwrap()
    });
    assert_eq!(
        failed,
        0,
        "{failed} of {} connections failed during the rotation",
        ok + failed
    );
    assert_eq!(
        auth_failed_drops(lab),
        refused_before,
        "an agent refused a datagram sealed under a key it did not hold yet"
    );
    // Every agent runs the finished rotation: one key, id 2, on every link.
    for h in &lab.state().hosts {
        let cfg: serde_json::Value = serde_json::from_str(
            &lab.state()
                .http()
                .get(&format!(
                    "{}/v1/hosts/{}/config",
                    lab.state().controller,
                    h.id
                ))
                .set("Authorization", &lab.state().bearer())
                .call()
                .unwrap()
                .into_string()
                .unwrap(),
        )
        .unwrap();
        for p in cfg["fabric_auth"]["peers"].as_array().unwrap() {
            assert_eq!(p["tx"]["id"], 2, "host {}: {p}", h.id);
            assert_eq!(p["rx"].as_array().unwrap().len(), 1, "host {}: {p}", h.id);
        }
    }
}

/// `GET /v1/{what}?tenant=acme` through the lab's controller.
fn eve_of(lab: &Lab, what: &str) -> Vec<serde_json::Value> {
    lab.state()
        .http()
        .get(&format!(
            "{}/v1/{what}?tenant=acme&limit=100000",
            lab.state().controller
        ))
        .set("Authorization", &lab.state().bearer())
        .call()
        .ok()
        .and_then(|r| r.into_json::<Vec<serde_json::Value>>().ok())
        .unwrap_or_default()
}

/// A 1 MiB download through west-to-b, which has the monitor in its path
/// (after the LB), appears in `/v1/flows` (what `sluice flows` prints) with
/// the bytes curl counted; the flow the IPS alerted on (the scenario's
/// `/etc/passwd` request through east-to-a, whose mirror is the monitor) is
/// `alerted`, the download is not.
///
/// What is compared: EVE's `bytes_*` are whole Ethernet frames. The reply
/// direction (`bytes_toclient`) is curl's `size_header + size_download`
/// (the HTTP response, headers and body) plus, per frame, Ethernet 14 +
/// IPv4 20 + TCP 32 (Linux's timestamps option), and 8 more for the
/// SYN-ACK's options (MSS, SACK permitted, window scale): exact, so a frame
/// missed or counted twice shows. The request direction carries curl's
/// `size_request` and at least 66 bytes per frame (its ACKs may carry SACK
/// blocks, so only a lower bound).
///
/// East-to-a's mirror shows both directions too: the reply's copy is taken
/// on the backend's host and crosses the fabric with the mirror's own mark,
/// so the monitor's host hands it to the monitor (it was once marked with the
/// reverse chain's hop and delivered to the client a second time).
fn flows_count_the_download_and_know_the_alert(lab: &Lab) {
    let gw = lab.state().vm("gateway").unwrap().netns.clone();
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &gw, "curl", "-sf", "--max-time", "30"])
        .args(["--interface", "203.0.113.10", "-o", "/dev/null", "-w"])
        .arg("%{size_download} %{size_header} %{size_request} %{local_port} %{http_code}")
        .arg("http://10.10.2.100/blob")
        .output()
        .unwrap();
    assert!(out.status.success(), "curl: {out:?}");
    let w = String::from_utf8_lossy(&out.stdout).to_string();
    let n: Vec<u64> = w.split_whitespace().map(|x| x.parse().unwrap()).collect();
    let (body, headers, request, port) = (n[0], n[1], n[2], n[3]);
    assert_eq!((body, n[4]), (1 << 20, 200), "{w}");

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let (record, flows) = loop {
        let flows = eve_of(lab, "flows");
        if let Some(r) = flows.iter().find(|f| f["src_port"] == port).cloned() {
            break (r, flows);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no flow record of client port {port} in {} flows: {}",
            flows.len(),
            flows
                .iter()
                .map(|f| format!(
                    "{}:{} > {}:{} {}\n",
                    f["src_ip"], f["src_port"], f["dest_ip"], f["dest_port"], f["flow"]
                ))
                .collect::<String>()
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    };
    assert_eq!(record["src_ip"], "203.0.113.10", "{record}");
    assert!(
        ["10.10.2.11", "10.10.2.12"].contains(&record["dest_ip"].as_str().unwrap_or("")),
        "after the LB: {record}"
    );
    let f = &record["flow"];
    let get = |k: &str| f[k].as_u64().unwrap();
    let payload = headers + body;
    assert_eq!(
        get("bytes_toclient"),
        payload + 66 * get("pkts_toclient") + 8,
        "{record}: curl counted {body} + {headers} header bytes"
    );
    assert!(
        get("bytes_toserver") >= request + 66 * get("pkts_toserver") + 8,
        "{record}: curl sent {request} bytes"
    );
    assert_eq!(f["alerted"], false, "{record}");

    let alert = eve_of(lab, "alerts")
        .into_iter()
        .find(|a| a["alert"]["signature_id"] == 1_000_001)
        .expect("the scenario's alert");
    let alerted: Vec<&serde_json::Value> = flows
        .iter()
        .filter(|f| f["flow_id"] == alert["flow_id"])
        .collect();
    assert!(
        !alerted.is_empty() && alerted.iter().all(|f| f["flow"]["alerted"] == true),
        "flows of the alert's flow {}: {alerted:?}",
        alert["flow_id"]
    );
    // The monitor saw that flow's replies too, through east-to-a's mirror:
    // copied on the backend's host (another than the monitor's) before the
    // LB, so under the backend's own address — a flow of its own to the
    // monitor, with the client's port.
    let client_port = alert["src_port"].clone();
    let backends = ["10.10.1.11", "10.10.1.12"];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let replies = eve_of(lab, "flows").into_iter().any(|f| {
            f["host"] == "acme/mon/0"
                && ((backends.contains(&f["src_ip"].as_str().unwrap_or(""))
                    && f["dest_port"] == client_port)
                    || (backends.contains(&f["dest_ip"].as_str().unwrap_or(""))
                        && f["src_port"] == client_port))
        });
        if replies {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no monitor record of the replies to client port {client_port}"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

/// (host id, desired version) of every host, as the controller reports them.
fn hosts(lab: &Lab) -> Vec<(u64, u64)> {
    let v: serde_json::Value = lab
        .state()
        .http()
        .get(&format!("{}/v1/hosts", lab.state().controller))
        .set("Authorization", &lab.state().bearer())
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    let mut out: Vec<(u64, u64)> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["id"].as_u64().unwrap_or(0),
                h["desired_version"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    out.sort_unstable();
    out
}

/// Three hosts running the elasticity example with its firewall `state:
/// STATE` (hash affinity), in `dir`.
fn elasticity_lab(dir: &std::path::Path, state: &str) -> Lab {
    elasticity_lab_pipelined(dir, state, 0)
}

/// [`elasticity_lab`] with the firewall's instances pipelined (`pipeline`
/// packets per window; 0: not).
fn elasticity_lab_pipelined(dir: &std::path::Path, state: &str, pipeline: u64) -> Lab {
    elasticity_lab_with(dir, state, pipeline, StoreKind::Single)
}

/// [`elasticity_lab_pipelined`] with the state store `store`.
fn elasticity_lab_with(dir: &std::path::Path, state: &str, pipeline: u64, store: StoreKind) -> Lab {
    let base = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/experiments/elasticity.yaml"
    ))
    .unwrap();
    let spec = dir.join("spec.yaml");
    let text = sluice_testbed::elasticity::variant_spec(&base, "fw", state, "hash", None).unwrap();
    // `state: cached` pipelines by default: a window of 0 is written out so
    // the non-pipelined run stays what it says.
    let text = if state == "cached" || pipeline > 0 {
        let mut doc: yaml_serde::Value = yaml_serde::from_str(&text).unwrap();
        doc["elements"]["fw"]
            .as_mapping_mut()
            .unwrap()
            .insert("pipeline".into(), pipeline.into());
        yaml_serde::to_string(&doc).unwrap()
    } else {
        text
    };
    std::fs::write(&spec, text).unwrap();
    Lab::up(&LabOptions {
        store,
        ..common::lab_options(spec, dir)
    })
    .unwrap_or_else(|e| panic!("testbed did not come up: {e}"))
}

/// A short ramp: 3 groups of 4 downloads at 256 KiB/s, 1.5 s apart.
fn small_ramp() -> sluice_testbed::elasticity::ElasticityOptions {
    sluice_testbed::elasticity::ElasticityOptions {
        steps: 3,
        flows_per_step: 4,
        step: std::time::Duration::from_millis(1500),
        hold_steps: 1,
        rate_kib: 256,
        ..Default::default()
    }
}

/// StatelessNF Fig. 4.8 in small: downloads ramp up through a firewall with its
/// state in the store, which is scaled out to two instances at the peak and back
/// to one on the way down. Every download must arrive whole: a changed split
/// moves flows between instances without breaking them.
#[test]
fn scaling_a_shared_state_firewall_out_and_in_breaks_no_download() {
    use sluice_testbed::elasticity::elasticity;
    let dir = tempfile::tempdir().unwrap();
    let lab = elasticity_lab(dir.path(), "shared");
    let o = small_ramp();
    let r = elasticity(&lab, &o, "shared/hash").unwrap();
    assert!(r.scale_out_at_s > 0.0 && r.scale_in_at_s > r.scale_out_at_s);
    assert_eq!(
        (r.identical, r.failed),
        (12, 0),
        "every download whole: {:?}",
        r.failures
    );
}

/// (name, lease epoch, cache hits) of every NF instance, over every host.
fn instance_leases(lab: &Lab) -> Vec<(String, u64, u64)> {
    let mut out = Vec::new();
    let http = lab.state().http();
    for h in &lab.state().hosts {
        let st: serde_json::Value = http
            .get(&format!("{}/v1/status", h.api))
            .call()
            .unwrap()
            .into_json()
            .unwrap();
        for i in st["health"].as_array().into_iter().flatten() {
            out.push((
                i["name"].as_str().unwrap_or_default().to_string(),
                i["lease_epoch"].as_u64().unwrap_or(0),
                i["cache_hits"].as_u64().unwrap_or(0),
            ));
        }
    }
    out
}

/// `state: cached` (docs/STATE.md, "Leases in the running system"): the
/// controller leases the firewall's group once every agent runs its split, the
/// instance caches its flows' records, and a scale-out and -in while leased
/// revokes the lease before the split changes. Every download arrives whole.
#[test]
fn a_cached_state_firewall_uses_its_lease_and_scales_without_breaking_downloads() {
    cached_firewall_scales(0);
}

/// The same with pipelined instances (`pipeline: 64`): batches in flight when
/// the lease is revoked and granted again are settled first; every download
/// arrives whole.
#[test]
fn a_pipelined_cached_firewall_scales_without_breaking_downloads() {
    cached_firewall_scales(64);
}

fn cached_firewall_scales(pipeline: u64) {
    use sluice_testbed::elasticity::elasticity;
    let dir = tempfile::tempdir().unwrap();
    let lab = elasticity_lab_pipelined(dir.path(), "cached", pipeline);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let leased = loop {
        let h = instance_leases(&lab);
        if let Some(i) = h.iter().find(|i| i.1 != 0) {
            break i.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no instance was granted a lease: {h:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let o = small_ramp();
    let r = elasticity(&lab, &o, "cached/hash").unwrap();
    assert_eq!(
        (r.identical, r.failed),
        (12, 0),
        "every download whole: {:?}",
        r.failures
    );
    // The instance that held the lease answered established flows from its
    // cache, and holds a lease again after the split changed twice.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let now = loop {
        let h = instance_leases(&lab);
        let i = h.iter().find(|i| i.0 == leased.0).cloned();
        if let Some(i) = i.filter(|i| i.1 != 0 && i.1 != leased.1) {
            break i;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} holds no new lease after the scale-in: {h:?}",
            leased.0
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    eprintln!("leased before: {leased:?}; after the scale-in: {now:?}");
    assert!(now.2 > 0, "the cache answered nothing: {now:?}");
    let log = std::fs::read_to_string(dir.path().join("controller.log")).unwrap_or_default();
    assert!(
        log.contains("leases revoked first"),
        "the split changed without a revocation:\n{log}"
    );
    if pipeline > 0 {
        // The instance removed by the scale-in printed its last statistics.
        let want = format!("\"window_packets\":{pipeline}");
        let logs = instance_logs(dir.path());
        assert!(
            logs.iter().any(|l| l.contains(&want)),
            "no instance ran pipelined: {logs:?}"
        );
    }
}

/// The text of every NF instance log under `dir` (`{run_dir}/{name}.log`).
fn instance_logs(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "log") {
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                if text.contains("\"lease\"") {
                    out.push(text);
                }
            }
        }
    }
    out
}

/// No single point of failure in the state store (docs/STATE.md,
/// "Replication"): the lab's store is a cluster of three primaries with a
/// replica each, and the firewall's state is in it (`state: shared`: every
/// packet's record). While paced downloads pass the firewall, the primary
/// holding the most records is SIGKILLed. Its replica takes over, every
/// download arrives whole (the records it held were on the replica before
/// their packets left the chain), and new connections work afterwards.
#[test]
fn a_killed_store_primary_breaks_no_connection() {
    use sluice_state::{Key, Namespace, Ops, StateStore};
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let lab = elasticity_lab_with(dir.path(), "shared", 0, StoreKind::Cluster);
    let st = lab.state().clone();
    assert_eq!(st.store_nodes.len(), 6, "{:?}", st.store_nodes);
    assert!(st.store.starts_with("rediss-cluster://"), "{}", st.store);
    let primaries: Vec<u16> = lab.store_primaries().iter().map(|n| n.port).collect();
    assert_eq!(primaries.len(), 3, "{primaries:?}");
    // ACL users are per node: the tenant's is on every one, replicas included.
    // The options: password_file and ca_file.
    let options = st.store.split_once('?').unwrap().1.to_string();
    for n in &st.store_nodes {
        let url = format!(
            "rediss-cluster://sluice-admin@127.0.0.1:{}?{options}",
            n.port
        );
        let mut admin = sluice_state_redis::acl::Admin::open(&url).unwrap();
        assert_eq!(
            admin.tenant_users().unwrap(),
            ["sluice-t-exp"],
            "{}",
            n.port
        );
    }

    // 12 downloads of 1 MiB at 256 KiB/s: about 4 s each, established
    // before the kill and still running through the failover.
    let downloads = Downloads::start(&lab, dir.path(), 12);
    // The primary with the most records: established connections depend on
    // what it held.
    let keys = lab.store_keys();
    let (victim, held) = keys
        .iter()
        .filter(|(p, _)| primaries.contains(p))
        .max_by_key(|(_, k)| *k)
        .copied()
        .unwrap();
    assert!(held > 0, "no records on any primary: {keys:?}");
    let mut probe = sluice_state_redis::ClusterStore::open(&st.store).unwrap();
    let killed = Instant::now();
    lab.kill_store_node(victim).unwrap();

    // The first successful state operation after the kill: a batch with
    // keys on every slot range, the dead primary's included.
    let mut tries = 0u32;
    loop {
        let mut ops = Ops::new();
        for i in 0..64u32 {
            ops.put(Key::new(Namespace(200), 1, &i.to_be_bytes()), b"probe");
        }
        tries += 1;
        if probe.execute(&mut ops).is_ok() {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "the store did not fail over within 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(tries > 1, "the dead primary's slots were served at once");
    eprintln!(
        "store primary 127.0.0.1:{victim} ({held} keys) SIGKILLed: first successful state \
         operation {:.2} s later ({tries} tries)",
        killed.elapsed().as_secs_f64()
    );
    let now: Vec<u16> = lab.store_primaries().iter().map(|n| n.port).collect();
    assert_eq!(now.len(), 3, "a replica took over: {now:?}");
    assert!(!now.contains(&victim), "{now:?}");

    // No established connection was lost: every download complete and intact;
    // new connections after the failover. The instances' replica counters
    // say whether a replica lagged past both waits (writes then went
    // unwaited, and a loss would be that, not a regression).
    let replica = |what: &str| {
        agents_sum(
            &lab,
            &format!("sluice_instance_store_replica_{what}_total{{"),
            "",
        )
    };
    let (waits, rewaits, shortfalls) =
        (replica("waits"), replica("rewaits"), replica("shortfalls"));
    eprintln!(
        "replica waits {waits}, acknowledged on the second wait {rewaits}, shortfalls {shortfalls}"
    );
    assert!(waits > 0, "the instances' writes waited for replicas");
    downloads.finish_whole();
    new_connections_work(&lab);
}

/// An operator drains the firewall's host for maintenance while downloads
/// pass the firewall (its state in the store): the instance moves to
/// another host, every download arrives whole, new connections work, and
/// the host shows drained until it is undrained.
#[test]
fn draining_a_host_moves_its_instance_and_breaks_no_connection() {
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let lab = elasticity_lab_with(dir.path(), "shared", 0, StoreKind::Single);
    let st = lab.state().clone();
    let fw_host = firewall_host(&lab);
    let token = st.token();
    let ca = st.ca_file.display().to_string();
    let env = [
        ("SLUICE_CONTROLLER", st.controller.as_str()),
        ("SLUICE_TOKEN", token.as_str()),
        ("SLUICE_CA_FILE", ca.as_str()),
    ];
    let downloads = Downloads::start(&lab, dir.path(), 8);
    let host = fw_host.to_string();
    let (code, out, err) = common::sluice_env(&["drain", "host", &host], &env);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("exp/fw/0 -> host "), "{out}");
    let at = Instant::now();
    let moved_to = loop {
        let elsewhere = st
            .hosts
            .iter()
            .map(|h| h.id)
            .find(|h| *h != fw_host && !instance_processes(&lab, *h).is_empty());
        if let (Some(h), true) = (elsewhere, instance_processes(&lab, fw_host).is_empty()) {
            break h;
        }
        assert!(
            at.elapsed() < Duration::from_secs(30),
            "the firewall instance did not move off host {fw_host}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    eprintln!(
        "host {fw_host} drained: its firewall instance runs on host {moved_to} {:.2} s later",
        at.elapsed().as_secs_f64()
    );
    downloads.finish_whole();
    new_connections_work(&lab);
    let (code, out, _) = common::sluice_env(&["get", "hosts", "-o", "json"], &env);
    assert_eq!(code, 0);
    let hosts: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    let drained: Vec<u64> = hosts
        .iter()
        .filter(|h| h["drained"] == true)
        .filter_map(|h| h["id"].as_u64())
        .collect();
    assert_eq!(drained, [u64::from(fw_host)]);
    let (code, out, err) = common::sluice_env(&["undrain", "host", &host], &env);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("undrained"), "{out}");
}

/// An operator drains one of two instances of a `state: local` (pinned)
/// firewall while downloads pass it: the downloads pinned to it continue
/// there (moving them would break them: their connection state is inside
/// it), every download arrives whole, new connections work, the instance
/// is stopped once its flows are done (the agents forget a pinned flow 30 s
/// after its last packet; the delay, 90 s, is not what stops it), and
/// undraining starts it again.
#[test]
fn draining_an_instance_lets_its_flows_finish_and_stops_it() {
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/experiments/elasticity.yaml"
    ))
    .unwrap()
    .replace("instances: 1", "instances: 2");
    let text =
        sluice_testbed::elasticity::variant_spec(&base, "fw", "local", "pinned", None).unwrap();
    assert!(
        text.contains("instances: 2"),
        "elasticity.yaml's fw changed"
    );
    let spec = dir.path().join("spec.yaml");
    std::fs::write(&spec, text).unwrap();
    let lab = Lab::up(&common::lab_options(spec, dir.path()))
        .unwrap_or_else(|e| panic!("testbed did not come up: {e}"));
    let st = lab.state().clone();
    let token = st.token();
    let ca = st.ca_file.display().to_string();
    let env = [
        ("SLUICE_CONTROLLER", st.controller.as_str()),
        ("SLUICE_TOKEN", token.as_str()),
        ("SLUICE_CA_FILE", ca.as_str()),
    ];
    // exp/fw/1 as `sluice get instances` shows it: (state, pid).
    let fw1 = || {
        let (code, out, err) = common::sluice_env(&["get", "instances", "-o", "json"], &env);
        assert_eq!(code, 0, "{out}{err}");
        let v: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
        let i = v
            .iter()
            .find(|i| i["name"] == "exp/fw/1")
            .expect("exp/fw/1 is placed")
            .clone();
        (
            i["state"].as_str().unwrap_or_default().to_string(),
            i["pid"].as_u64(),
        )
    };
    let wait = |what: &str, ok: &dyn Fn((String, Option<u64>)) -> bool| {
        let at = Instant::now();
        loop {
            let now = fw1();
            if ok(now.clone()) {
                return now;
            }
            // Pinned flows are forgotten 30 s after their last packet.
            assert!(
                at.elapsed() < Duration::from_secs(60),
                "exp/fw/1 is not {what}: {now:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let (_, pid) = wait("running", &|(s, pid)| s == "alive" && pid.is_some());
    let pid = pid.unwrap();
    let downloads = Downloads::start(&lab, dir.path(), 8);
    let (code, out, err) = common::sluice_env(
        &["drain", "instance", "exp", "fw", "1", "--delay", "90s"],
        &env,
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("exp/fw/1 on host") && out.contains("draining"),
        "{out}"
    );
    // New connections avoid it; the pinned downloads keep it running.
    new_connections_work(&lab);
    let (code, out, _) = common::sluice_env(&["get", "instances"], &env);
    assert_eq!(code, 0);
    assert!(
        out.lines()
            .any(|l| l.starts_with("exp/fw/1") && (l.contains("DRAINING") || l.contains("STOPPED"))),
        "{out}"
    );
    downloads.finish_whole();
    let drained = Instant::now();
    wait("stopped", &|(s, _)| s == "stopped");
    let (code, out, _) = common::sluice_env(&["events", "--json"], &env);
    assert_eq!(code, 0);
    assert!(
        out.contains("exp/fw/1 stopped after draining: no flow is pinned to it any more"),
        "stopped by its flows' end, not its delay: {out}"
    );
    let at = Instant::now();
    while std::path::Path::new(&format!("/proc/{pid}")).exists() {
        assert!(
            at.elapsed() < Duration::from_secs(10),
            "exp/fw/1's process {pid} still runs after it was stopped"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "exp/fw/1 stopped {:.2} s after the downloads ended",
        drained.elapsed().as_secs_f64()
    );
    new_connections_work(&lab);
    // A stopped instance is not a degraded deployment.
    let (code, out, err) = common::sluice_env(&["status"], &env);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = common::sluice_env(&["undrain", "instance", "exp", "fw", "1"], &env);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("serving"), "{out}");
    wait("running again", &|(s, pid)| s == "alive" && pid.is_some());
    new_connections_work(&lab);
}

/// Paced downloads (1 MiB at 256 KiB/s, about 4 s each) from `srv1` to the
/// gateway of the elasticity example, running in the background.
struct Downloads {
    files: Vec<std::path::PathBuf>,
    kids: Vec<std::process::Child>,
}

impl Downloads {
    /// Starts `n` downloads into `dir` and waits until each has bytes.
    fn start(lab: &Lab, dir: &std::path::Path, n: usize) -> Downloads {
        use std::time::{Duration, Instant};
        let st = lab.state();
        let gw = st.vm("gateway").unwrap().netns.clone();
        let srv = st.vm("srv1").unwrap().addrs[0].clone();
        let files: Vec<std::path::PathBuf> =
            (0..n).map(|i| dir.join(format!("download-{i}"))).collect();
        let kids = files
            .iter()
            .map(|f| {
                std::process::Command::new("ip")
                    .args(["netns", "exec", &gw, "curl", "-sf", "--max-time", "60"])
                    .args(["--interface", "198.51.100.10", "-o"])
                    .arg(f)
                    .arg(format!("http://{srv}/paced/blob?rate=262144"))
                    .spawn()
                    .unwrap()
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !files
            .iter()
            .all(|f| std::fs::metadata(f).is_ok_and(|m| m.len() > 0))
        {
            assert!(Instant::now() < deadline, "the downloads did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Downloads { files, kids }
    }

    /// Waits for every download and checks each arrived complete and intact.
    fn finish_whole(self) {
        let blob = sluice_testbed::lab::blob();
        for (mut k, f) in self.kids.into_iter().zip(&self.files) {
            let status = k.wait().unwrap();
            let got = std::fs::read(f).unwrap_or_default();
            assert!(
                status.success() && got.len() == blob.len() && got == blob,
                "{}: curl {status}, {} of {} bytes",
                f.display(),
                got.len(),
                blob.len()
            );
        }
    }
}

/// Five new connections from the gateway to `srv1` get its page.
fn new_connections_work(lab: &Lab) {
    let srv = lab.state().vm("srv1").unwrap().addrs[0].clone();
    for _ in 0..5 {
        let body = scenario::curl(
            lab,
            "gateway",
            Some("198.51.100.10"),
            &format!("http://{srv}/index.html"),
            10,
        );
        assert_eq!(body.as_deref(), Some(&b"srv1\n"[..]), "a new connection");
    }
}

/// The host of the elasticity lab's one firewall instance.
fn firewall_host(lab: &Lab) -> u32 {
    lab.state()
        .hosts
        .iter()
        .map(|h| h.id)
        .find(|h| !instance_processes(lab, *h).is_empty())
        .expect("a host runs the firewall")
}

/// The NF instance processes running for host `host` of `lab`, by the
/// namespace each serves (`--netns PREFIXhHiN` on its command line).
fn instance_processes(lab: &Lab, host: u32) -> Vec<String> {
    let tag = format!("{}h{host}i", lab.state().prefix);
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmd
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.iter().any(|a| a == "instance") {
            if let Some(ns) = args.windows(2).find(|w| w[0] == "--netns").map(|w| &w[1]) {
                if ns.starts_with(&tag) {
                    out.push(ns.clone());
                }
            }
        }
    }
    out.sort();
    out
}

/// The NF instance processes running for host `host` of `lab`: (namespace, pid).
fn instance_pids(lab: &Lab, host: u32) -> Vec<(String, u32)> {
    let tag = format!("{}h{host}i", lab.state().prefix);
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmd
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.iter().any(|a| a == "instance") {
            if let Some(ns) = args.windows(2).find(|w| w[0] == "--netns").map(|w| &w[1]) {
                if ns.starts_with(&tag) {
                    out.push((ns.clone(), pid));
                }
            }
        }
    }
    out.sort();
    out
}

/// Self-healing hosts (issue 22): the testbed supervises its agents as
/// systemd does on a real host. The agent of the host running the firewall
/// instance is SIGKILLed while downloads pass that firewall: its supervisor
/// starts it again, the new agent runs its saved configuration and adopts the
/// instance its previous life left running (the same process: not replaced,
/// none duplicated), and every download arrives whole; new connections work.
/// Prints how long after the kill the agent ran its configuration again, when
/// the instance's first heartbeat reached it, and the downloads' longest stall.
#[test]
fn a_killed_agent_is_restarted_and_breaks_no_connection() {
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let lab = elasticity_lab_with(dir.path(), "shared", 0, StoreKind::Single);
    let st = lab.state().clone();
    let fw_host = firewall_host(&lab);
    let before = instance_pids(&lab, fw_host);
    assert_eq!(before.len(), 1, "{before:?}");

    let downloads = Downloads::start(&lab, dir.path(), 8);
    let bytes = |d: &Downloads| -> u64 {
        d.files
            .iter()
            .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
            .sum()
    };
    let killed = lab.kill_agent(fw_host).unwrap();
    let at = Instant::now();
    let api = st
        .hosts
        .iter()
        .find(|h| h.id == fw_host)
        .unwrap()
        .api
        .clone();
    // Polled every 10 ms: when the new agent runs its configuration, when the
    // instance's first heartbeat reaches it, and the downloads' longest stall.
    let (mut configured, mut heard) = (None, None);
    let (mut last_bytes, mut last_growth, mut stall) = (bytes(&downloads), at, Duration::ZERO);
    let mut status = serde_json::Value::Null;
    loop {
        assert!(
            at.elapsed() < Duration::from_secs(30),
            "host {fw_host}'s agent was not started again, or its instance never heartbeat"
        );
        let now = Instant::now();
        let b = bytes(&downloads);
        if b > last_bytes {
            stall = stall.max(now - last_growth);
            last_growth = now;
            last_bytes = b;
        }
        // Served again: the downloads moved after the instance was heard from.
        if heard.is_some_and(|h| last_growth > h) {
            break;
        }
        let restarted = lab.agent_pid(fw_host).is_some_and(|p| p != killed);
        if restarted && heard.is_none() {
            if let Some(s) = st
                .http()
                .get(&format!("{api}/v1/status"))
                .timeout(Duration::from_secs(1))
                .call()
                .ok()
                .and_then(|r| r.into_json::<serde_json::Value>().ok())
                .filter(|s| s["config_version"].as_u64().unwrap_or(0) > 0)
            {
                configured.get_or_insert(now - at);
                let hb = s["health"].as_array().is_some_and(|h| {
                    !h.is_empty() && h.iter().all(|i| i["last_heartbeat_age_ms"].is_u64())
                });
                if hb {
                    heard = Some(now);
                    status = s;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let heard = heard.unwrap() - at;
    eprintln!(
        "agent of host {fw_host} (pid {killed}) SIGKILLed: running its configuration again {:.3} s later, \
         its instance heard from {:.3} s after the kill, downloads' longest stall {:.3} s, \
         failovers in the new agent: {}",
        configured.unwrap_or_default().as_secs_f64(),
        heard.as_secs_f64(),
        stall.as_secs_f64(),
        status["failover_events"].as_array().map_or(0, Vec::len)
    );

    downloads.finish_whole();
    assert_eq!(
        instance_pids(&lab, fw_host),
        before,
        "the same instance process, adopted: one per instance, none replaced"
    );
    new_connections_work(&lab);
}
