//! Real traffic through a lab running the Figure 4 tenant
//! (`examples/tenant/figure4.yaml`): what the README's main command shows and what
//! the end-to-end tests assert. Every check runs real programs (curl against nginx,
//! tshark on the fabric) inside the lab's namespaces and reports what it saw.

use std::fs;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::lab::{blob, Lab, LabError, LabState};

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// Short name.
    pub name: &'static str,
    /// It behaved as the spec says.
    pub ok: bool,
    /// What was observed.
    pub detail: String,
}

/// Every check's outcome.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// In the order run.
    pub checks: Vec<Check>,
}

impl Report {
    /// All checks passed.
    pub fn ok(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }

    fn add(&mut self, name: &'static str, ok: bool, detail: String) {
        self.checks.push(Check { name, ok, detail });
    }
}

/// `curl` from VM `vm` with source address `src` (None: the VM's own); returns
/// the body on success.
pub fn curl(lab: &Lab, vm: &str, src: Option<&str>, url: &str, max_s: u32) -> Option<Vec<u8>> {
    let v = lab.state().vm(vm)?;
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &v.netns, "curl", "-sf", "--max-time"])
        .arg(max_s.to_string());
    if let Some(s) = src {
        cmd.args(["--interface", s]);
    }
    cmd.arg(url);
    let out = cmd.stderr(Stdio::null()).output().ok()?;
    out.status.success().then_some(out.stdout)
}

/// Which backends answer `index.html` at `vip` for clients at `src`, over up to
/// `tries` connections (each from a new source port).
fn backends(lab: &Lab, src: &str, vip: &str, tries: usize, want: usize) -> (Vec<String>, usize) {
    let mut seen: Vec<String> = Vec::new();
    let mut failed = 0;
    for _ in 0..tries {
        match curl(
            lab,
            "gateway",
            Some(src),
            &format!("http://{vip}/index.html"),
            5,
        ) {
            Some(b) => {
                let name = String::from_utf8_lossy(&b).trim().to_string();
                if !seen.contains(&name) {
                    seen.push(name);
                }
            }
            None => failed += 1,
        }
        if seen.len() >= want {
            break;
        }
    }
    seen.sort();
    (seen, failed)
}

fn access_logs(lab: &Lab) -> String {
    let mut all = String::new();
    for v in &lab.state().vms {
        let p = lab
            .state()
            .dir
            .join(format!("nginx-{}/logs/access.log", v.name));
        if let Ok(t) = fs::read_to_string(p) {
            all.push_str(&t);
        }
    }
    all
}

/// `GET url` of `st`'s lab as JSON (trusting its CAs); `operator`: with the
/// operator's token (a controller URL; an agent has no use for it).
fn get_json(url: &str, st: &LabState, operator: bool) -> Option<serde_json::Value> {
    let mut req = st.http().get(url).timeout(Duration::from_secs(5));
    if operator {
        req = req.set("Authorization", &st.bearer());
    }
    req.call().ok()?.into_json().ok()
}

fn as_list(v: &serde_json::Value, key: &str) -> Vec<serde_json::Value> {
    v.as_array()
        .or_else(|| v.get(key).and_then(|x| x.as_array()))
        .cloned()
        .unwrap_or_default()
}

/// Packets the agents sent to the instances of `middlebox`.
fn packets_to(lab: &Lab, middlebox: &str) -> u64 {
    let st = lab.state();
    let mut total = 0;
    for h in &st.hosts {
        let Some(status) = get_json(&format!("{}/v1/status", h.api), st, false) else {
            continue;
        };
        for p in as_list(&status, "ports") {
            let name = p.get("name").and_then(|n| n.as_str()).unwrap_or("");
            if name.split('/').nth(1) == Some(middlebox) {
                total += p
                    .pointer("/counters/tx_packets")
                    .and_then(|x| x.as_u64())
                    .unwrap_or(0);
            }
        }
    }
    total
}

/// Over the instances of `middlebox`: (how many, how many hold an ownership
/// lease, their flow caches' hits), from the agents' instance health.
pub fn leases_of(lab: &Lab, middlebox: &str) -> (usize, usize, u64) {
    let (mut n, mut leased, mut hits) = (0, 0, 0);
    let st = lab.state();
    for h in &st.hosts {
        let Some(status) = get_json(&format!("{}/v1/status", h.api), st, false) else {
            continue;
        };
        for i in as_list(&status, "health") {
            let name = i.get("name").and_then(|n| n.as_str()).unwrap_or("");
            if name.split('/').nth(1) != Some(middlebox) {
                continue;
            }
            n += 1;
            let epoch = i.get("lease_epoch").and_then(|x| x.as_u64()).unwrap_or(0);
            leased += usize::from(epoch != 0);
            hits += i.get("cache_hits").and_then(|x| x.as_u64()).unwrap_or(0);
        }
    }
    (n, leased, hits)
}

/// Runs every check of the Figure 4 tenant against a lab brought up with it and
/// nginx in the web VMs.
pub fn figure4(lab: &Lab) -> Result<Report, LabError> {
    let mut r = Report::default();
    let expected = blob();
    // If the firewall is `state: cached`, the controller leases its group once
    // every agent runs the split (docs/STATE.md). Wait for that, briefly.
    let cached = get_json(
        &format!("{}/v1/tenants/acme/middleboxes/fw", lab.state().controller),
        lab.state(),
        true,
    )
    .is_some_and(|m| m.get("state").and_then(|s| s.as_str()) == Some("cached"));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut fw = leases_of(lab, "fw");
    while cached && (fw.0 == 0 || fw.1 < fw.0) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        fw = leases_of(lab, "fw");
    }

    // Load balancing through fw -> ips -> lb-a, from both client subnets.
    let (east_a, f1) = backends(lab, "198.51.100.10", "10.10.1.100", 24, 2);
    r.add(
        "east clients reach both web-a backends through fw, ips, lb-a",
        east_a == ["web-a1", "web-a2"],
        format!("backends seen: {east_a:?}, failed requests: {f1}"),
    );
    let (west_b, f2) = backends(lab, "203.0.113.10", "10.10.2.100", 24, 2);
    r.add(
        "west clients reach both web-b backends through fw, lb-b",
        west_b == ["web-b1", "web-b2"],
        format!("backends seen: {west_b:?}, failed requests: {f2}"),
    );
    let (west_a, f3) = backends(lab, "203.0.113.10", "10.10.1.100", 24, 2);
    r.add(
        "west clients reach web-a through fw, ips, lb-a",
        !west_a.is_empty() && f3 == 0,
        format!("backends seen: {west_a:?}, failed requests: {f3}"),
    );

    // Identical bytes, several downloads.
    let mut good = 0;
    let n = 4;
    for _ in 0..n {
        if curl(
            lab,
            "gateway",
            Some("198.51.100.10"),
            "http://10.10.1.100/blob",
            20,
        )
        .as_deref()
            == Some(&expected[..])
        {
            good += 1;
        }
    }
    r.add(
        "1 MiB downloads arrive with identical bytes",
        good == n,
        format!("{good} of {n} downloads identical to the served file"),
    );
    if cached {
        // Heartbeats carry the counters every 10 ms.
        std::thread::sleep(Duration::from_millis(50));
        let after = leases_of(lab, "fw");
        r.add(
            "the cached firewall's instances hold leases and read from their caches",
            fw.0 > 0 && fw.1 == fw.0 && after.2 > fw.2,
            format!(
                "{} of {} instances leased before the traffic, {} now; cache hits {} -> {}",
                fw.1, fw.0, after.1, fw.2, after.2
            ),
        );
    }

    // The IPS blocks a request carrying its signature.
    let before = access_logs(lab);
    let blocked = curl(
        lab,
        "gateway",
        Some("198.51.100.10"),
        "http://10.10.1.100/index.html?f=/etc/passwd",
        3,
    );
    let after = access_logs(lab);
    r.add(
        "a request carrying the IPS signature is blocked",
        blocked.is_none() && !after[before.len().min(after.len())..].contains("/etc/passwd"),
        format!(
            "curl {}; servers logged it: {}",
            if blocked.is_some() {
                "succeeded"
            } else {
                "failed"
            },
            after.contains("/etc/passwd")
        ),
    );

    // The alert is reported once, through the controller, from the instance's
    // EVE log on its host.
    let alerts_of = |lab: &Lab| -> Vec<serde_json::Value> {
        get_json(
            &format!("{}/v1/alerts?tenant=acme", lab.state().controller),
            lab.state(),
            true,
        )
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
        .into_iter()
        .filter(|a| a["alert"]["signature_id"] == 1_000_001)
        .collect()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut alerts = alerts_of(lab);
    while alerts.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        alerts = alerts_of(lab);
    }
    // Anything written twice would be there by now too.
    std::thread::sleep(Duration::from_millis(300));
    let alerts = alerts_of(lab);
    r.add(
        "the IPS's alert shows up once in `sluice alerts`",
        alerts.len() == 1
            && alerts[0]["alert"]["action"] == "blocked"
            && alerts[0]["dest_port"] == 80
            && alerts[0]["host"]
                .as_str()
                .is_some_and(|h| h.starts_with("acme/ips/")),
        format!(
            "{} alert(s) with sid 1000001: {}",
            alerts.len(),
            serde_json::Value::Array(alerts.clone())
        ),
    );

    // The firewall's deny rule: the client never reaches a server.
    let denied = curl(
        lab,
        "gateway",
        Some("198.51.100.66"),
        "http://10.10.1.100/index.html",
        3,
    );
    let logs = access_logs(lab);
    r.add(
        "traffic the firewall denies never reaches a server",
        denied.is_none() && !logs.contains("198.51.100.66"),
        format!(
            "curl from 198.51.100.66 {}; servers logged it: {}",
            if denied.is_some() {
                "succeeded"
            } else {
                "failed"
            },
            logs.contains("198.51.100.66")
        ),
    );

    // The mirror: the monitor instance received copies of east-to-a's traffic.
    let mirrored = packets_to(lab, "mon");
    r.add(
        "the mirror (monitor) receives a copy",
        mirrored > 0,
        format!("{mirrored} packets sent to the monitor's instances"),
    );

    // Traffic in no chain flows directly: web-a1 -> web-b1.
    let direct = curl(lab, "web-a1", None, "http://10.10.2.11/index.html", 5);
    r.add(
        "traffic in no chain is forwarded directly",
        direct
            .as_deref()
            .map(|b| String::from_utf8_lossy(b).trim().to_string())
            == Some("web-b1".into()),
        format!(
            "web-a1 -> web-b1: {:?}",
            direct.map(|b| String::from_utf8_lossy(&b).trim().to_string())
        ),
    );

    // The fabric carries Geneve that tshark decodes.
    let vnis = geneve_on_fabric(lab);
    r.add(
        "fabric packets decode as Geneve in tshark",
        !vnis.is_empty(),
        format!("VNIs tshark decoded on the fabric bridge: {vnis:?}"),
    );

    // A bad spec is refused and changes nothing.
    let bad = "tenant: acme\nelements:\n  c: { type: external, subnets: [198.51.100.0/24] }\n  w:\n    type: service\n    vms: { web-a1: 10.10.1.11 }\nchains:\n  - name: x\n    path: [c, nosuch, w]\n";
    let versions_before = host_versions(lab);
    let resp = lab
        .state()
        .http()
        .put(&format!("{}/v1/tenants/acme", lab.state().controller))
        .set("Authorization", &lab.state().bearer())
        .set("Content-Type", "application/yaml")
        .timeout(Duration::from_secs(10))
        .send_string(bad);
    let (refused, msg) = match resp {
        Err(ureq::Error::Status(code, body)) => (
            (400..500).contains(&code),
            format!(
                "HTTP {code}: {}",
                body.into_string().unwrap_or_default().trim()
            ),
        ),
        Ok(_) => (false, "accepted".to_string()),
        Err(e) => (false, e.to_string()),
    };
    let still = curl(
        lab,
        "gateway",
        Some("198.51.100.10"),
        "http://10.10.1.100/index.html",
        5,
    )
    .is_some();
    let versions_after = host_versions(lab);
    r.add(
        "a bad spec is refused and leaves the system untouched",
        refused && msg.contains("nosuch") && still && versions_before == versions_after,
        format!(
            "{msg}; traffic still flows: {still}; host config versions unchanged: {}",
            versions_before == versions_after
        ),
    );
    Ok(r)
}

fn host_versions(lab: &Lab) -> Vec<String> {
    let Some(v) = get_json(
        &format!("{}/v1/hosts", lab.state().controller),
        lab.state(),
        true,
    ) else {
        return Vec::new();
    };
    as_list(&v, "hosts")
        .iter()
        .map(|h| {
            format!(
                "{}:{}",
                h.get("id")
                    .or_else(|| h.get("host"))
                    .cloned()
                    .unwrap_or_default(),
                h.get("desired_version")
                    .or_else(|| h.get("config_version"))
                    .cloned()
                    .unwrap_or_default()
            )
        })
        .collect()
}

/// Captures Geneve packets on the fabric bridge with tshark while a request runs,
/// and returns the VNIs tshark decoded.
pub fn geneve_on_fabric(lab: &Lab) -> Vec<u32> {
    let (ns, br) = &lab.state().fabric;
    let pcap = lab.state().dir.join("fabric.pcap");
    let cap = Command::new("ip")
        .args([
            "netns", "exec", ns, "timeout", "45", "tshark", "-q", "-i", br,
        ])
        .args(["-f", "udp port 6081", "-c", "20", "-w"])
        .arg(&pcap)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut cap) = cap else {
        return Vec::new();
    };
    // tshark needs a moment before it captures (many seconds on a loaded
    // 2-core machine: it loads every dissector first); keep traffic flowing
    // until it has its packets or gives up, not for a fixed number of tries.
    let until = std::time::Instant::now() + Duration::from_secs(45);
    while std::time::Instant::now() < until {
        let _ = curl(
            lab,
            "gateway",
            Some("203.0.113.10"),
            "http://10.10.2.100/index.html",
            3,
        );
        if let Ok(Some(_)) = cap.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    let _ = cap.wait();
    let out = Command::new("tshark")
        .arg("-r")
        .arg(&pcap)
        .args(["-Y", "geneve", "-T", "fields", "-e", "geneve.vni"])
        .output();
    let mut vnis: Vec<u32> = out
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| {
                    let t = l.trim();
                    t.strip_prefix("0x")
                        .and_then(|h| u32::from_str_radix(h, 16).ok())
                        .or_else(|| t.parse().ok())
                })
                .collect()
        })
        .unwrap_or_default();
    vnis.sort_unstable();
    vnis.dedup();
    vnis
}
