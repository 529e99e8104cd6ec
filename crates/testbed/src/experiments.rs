//! Experiments on a running lab: StatelessNF's failover experiment (Fig. 4.7).
//!
//! Many concurrent HTTP downloads cross a middlebox with several instances; one
//! instance is killed with SIGKILL mid-transfer. With state in the store, the
//! surviving instance carries the dead one's connections on; with local state
//! (the baseline, `state: local` on the middlebox) it has never seen them.
//! Each run reports how many downloads completed with identical bytes and the
//! total time, next to a run without failure in the same lab. When the
//! middlebox is an IPS whose rule matches each download's request (issue 20,
//! `examples/experiments/failover-ips.yaml`), each run also counts the alerts
//! per download: each must be raised exactly once, the killed instance's
//! included.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::lab::{other, Lab, LabError};

/// What to run.
#[derive(Debug, Clone)]
pub struct FailoverOptions {
    /// Concurrent downloads.
    pub downloads: usize,
    /// Size of each download, bytes.
    pub size: usize,
    /// curl's `--limit-rate` per download (e.g. `512k`), so transfers last long
    /// enough to be cut in the middle.
    pub rate: String,
    /// When to kill, after the downloads started.
    pub kill_after: Duration,
    /// The middlebox whose instance 0 is killed.
    pub middlebox: String,
    /// Client address (in the gateway VM) and URL host.
    pub client: String,
    /// Server VM name (serves the file).
    pub server: String,
}

/// One run's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// `no failure` or `instance killed`.
    pub label: String,
    /// Downloads that finished with every byte identical to the served file.
    pub identical: usize,
    /// Downloads that failed or came back different.
    pub failed: usize,
    /// From the first start to the last end, seconds.
    pub total_s: f64,
    /// curl's verdicts of the failed ones (exit code, bytes), a few.
    pub failures: Vec<String>,
    /// The IPS's alerts, per download (None: the middlebox is no IPS).
    pub alerts: Option<AlertCount>,
}

/// A run's IPS alerts against its downloads, whose requests each match the
/// spec's rule once: what `GET /v1/alerts` lists for the tenant, new since
/// the run started, by flow (the client's port).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AlertCount {
    /// Requests made (one per download).
    pub requests: usize,
    /// Flows alerted exactly once.
    pub once: usize,
    /// Flows alerted more than once.
    pub duplicated: usize,
    /// Requests with no alert.
    pub missing: usize,
}

impl AlertCount {
    /// Counts `alerts` (EVE alert objects) against `requests` downloads.
    pub fn of(requests: usize, alerts: &[serde_json::Value]) -> AlertCount {
        let mut per_flow: std::collections::BTreeMap<String, usize> = Default::default();
        for a in alerts {
            let flow = format!("{}:{}", a["src_ip"], a["src_port"]);
            *per_flow.entry(flow).or_default() += 1;
        }
        let once = per_flow.values().filter(|n| **n == 1).count();
        AlertCount {
            requests,
            once,
            duplicated: per_flow.len() - once,
            missing: requests.saturating_sub(per_flow.len()),
        }
    }
}

/// Both runs and the failover as the agents saw it.
#[derive(Debug, Clone, Serialize)]
pub struct FailoverReport {
    /// Without failure.
    pub baseline: RunResult,
    /// With one instance killed.
    pub killed: RunResult,
    /// killed.total_s / baseline.total_s (StatelessNF: within 10%).
    pub time_ratio: f64,
    /// The instance killed.
    pub instance: String,
    /// The agents' failover records for it (raw, from `GET /v1/status`).
    pub agent_events: Vec<serde_json::Value>,
    /// From the SIGKILL to the agent's rewritten groups being in force, ms (the
    /// first record after the kill; None if no agent recorded one).
    pub kill_to_moved_ms: Option<f64>,
    /// What the agent noticed first: `exited` (the supervisor reaped the
    /// process) or `heartbeat` (its silence).
    pub detected_by: Option<String>,
}

/// The file the server serves for the experiment (deterministic bytes).
pub(crate) fn payload(size: usize) -> Vec<u8> {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    (0..size)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn start_downloads(
    lab: &Lab,
    o: &FailoverOptions,
    out: &Path,
    addr: &str,
) -> Result<Vec<Child>, LabError> {
    let gw = lab
        .state()
        .vm("gateway")
        .ok_or_else(|| other("the lab has no gateway VM"))?;
    fs::create_dir_all(out).map_err(other)?;
    let mut kids = Vec::new();
    for i in 0..o.downloads {
        let file = out.join(format!("d{i}"));
        let child = Command::new("ip")
            .args(["netns", "exec", &gw.netns, "curl", "-s", "-o"])
            .arg(&file)
            .args(["--limit-rate", &o.rate, "--max-time", "300"])
            .args(["--interface", &o.client])
            .arg(format!("http://{addr}/big"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| other(format!("curl: {e}")))?;
        kids.push(child);
    }
    Ok(kids)
}

fn finish(
    label: &str,
    t0: Instant,
    kids: Vec<Child>,
    out: &Path,
    want: &[u8],
) -> Result<RunResult, LabError> {
    let mut identical = 0;
    let mut failures = Vec::new();
    let started = kids.len();
    for (i, mut k) in kids.into_iter().enumerate() {
        let st = k.wait().map_err(other)?;
        let got = fs::read(out.join(format!("d{i}"))).unwrap_or_default();
        if st.success() && got == want {
            identical += 1;
        } else if failures.len() < 5 {
            failures.push(format!(
                "download {i}: curl exit {:?}, {} of {} bytes{}",
                st.code(),
                got.len(),
                want.len(),
                if got.len() == want.len() {
                    " (different bytes)"
                } else {
                    ""
                }
            ));
        }
    }
    let total_s = t0.elapsed().as_secs_f64();
    let _ = fs::remove_dir_all(out);
    Ok(RunResult {
        label: label.into(),
        identical,
        // Every download started and not identical, those that never wrote a
        // byte included.
        failed: started - identical,
        total_s,
        failures,
        alerts: None,
    })
}

fn instance_pid(lab: &Lab, name: &str) -> Result<u32, LabError> {
    let v: serde_json::Value = lab
        .state()
        .http()
        .get(&format!("{}/v1/instances", lab.state().controller))
        .set("Authorization", &lab.state().bearer())
        .call()
        .map_err(other)?
        .into_json()
        .map_err(other)?;
    v.as_array()
        .into_iter()
        .flatten()
        .find(|i| i["name"].as_str() == Some(name))
        .and_then(|i| i["pid"].as_u64())
        .map(|p| p as u32)
        .ok_or_else(|| other(format!("no running instance `{name}`: {v}")))
}

/// Every agent's `GET /v1/status` that answered (`apis`: the agents' API
/// URLs; `http`: a client trusting the hosts' CA, [`crate::lab::LabState::http`]).
pub(crate) fn agent_statuses(http: &ureq::Agent, apis: &[String]) -> Vec<serde_json::Value> {
    apis.iter()
        .filter_map(|api| {
            http.get(&format!("{api}/v1/status"))
                .timeout(Duration::from_secs(2))
                .call()
                .ok()?
                .into_json()
                .ok()
        })
        .collect()
}

fn agent_events(lab: &Lab, name: &str) -> Vec<serde_json::Value> {
    let apis: Vec<String> = lab.state().hosts.iter().map(|h| h.api.clone()).collect();
    let mut out = Vec::new();
    for v in agent_statuses(&lab.state().http(), &apis) {
        for key in ["failover_events", "failovers"] {
            for e in v[key].as_array().into_iter().flatten() {
                if e.to_string().contains(name) {
                    out.push(e.clone());
                }
            }
        }
    }
    out
}

/// The `function` of the tenant's middlebox `name`, if the controller says.
fn middlebox_function(lab: &Lab, name: &str) -> Option<String> {
    let st = lab.state();
    let v: serde_json::Value = st
        .http()
        .get(&format!(
            "{}/v1/tenants/{}/middleboxes/{name}",
            st.controller, st.tenant
        ))
        .set("Authorization", &st.bearer())
        .call()
        .ok()?
        .into_json()
        .ok()?;
    v["function"].as_str().map(String::from)
}

/// The tenant's alerts not in `seen` (which they join), once their number
/// stopped growing (the agents serve what the instances wrote), counted
/// against `requests`.
fn count_new_alerts(
    lab: &Lab,
    requests: usize,
    seen: &mut Vec<String>,
) -> Result<AlertCount, LabError> {
    let st = lab.state();
    let fetch = || -> Result<Vec<serde_json::Value>, LabError> {
        let v: serde_json::Value = st
            .http()
            .get(&format!(
                "{}/v1/alerts?tenant={}&limit=100000",
                st.controller, st.tenant
            ))
            .set("Authorization", &st.bearer())
            .call()
            .map_err(other)?
            .into_json()
            .map_err(other)?;
        Ok(v.as_array().cloned().unwrap_or_default())
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut last = fetch()?;
    loop {
        std::thread::sleep(Duration::from_millis(1000));
        let now = fetch()?;
        if now.len() == last.len() || Instant::now() > deadline {
            last = now;
            break;
        }
        last = now;
    }
    let new: Vec<serde_json::Value> = last
        .into_iter()
        .filter(|a| !seen.contains(&a.to_string()))
        .collect();
    seen.extend(new.iter().map(|a| a.to_string()));
    Ok(AlertCount::of(requests, &new))
}

/// Runs the failover experiment in `lab` (brought up with web servers and a spec
/// shaped like `examples/experiments/failover.yaml`).
pub fn failover(lab: &Lab, o: &FailoverOptions) -> Result<FailoverReport, LabError> {
    let st = lab.state();
    let srv = st
        .vm(&o.server)
        .ok_or_else(|| other(format!("no VM `{}` in the lab", o.server)))?;
    let addr = srv.addrs[0].clone();
    let want = payload(o.size);
    let root: PathBuf = st.dir.join(format!("www-{}", o.server));
    fs::write(root.join("big"), &want).map_err(other)?;
    let out = st.dir.join("downloads");

    let ips = middlebox_function(lab, &o.middlebox).as_deref() == Some("ips");
    let mut seen = Vec::new();

    // Without failure.
    let t0 = Instant::now();
    let kids = start_downloads(lab, o, &out, &addr)?;
    let mut baseline = finish("no failure", t0, kids, &out, &want)?;
    if ips {
        baseline.alerts = Some(count_new_alerts(lab, o.downloads, &mut seen)?);
    }

    // With instance 0 killed mid-transfer.
    let name = format!("{}/{}/0", st.tenant, o.middlebox);
    let pid = instance_pid(lab, &name)?;
    let t0 = Instant::now();
    let kids = start_downloads(lab, o, &out, &addr)?;
    std::thread::sleep(o.kill_after);
    let killed_at_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    // SAFETY: killing the NF instance process the lab's agent started.
    unsafe {
        libc::kill(pid as i32, libc::SIGKILL);
    }
    let mut killed = finish("instance killed", t0, kids, &out, &want)?;
    if ips {
        killed.alerts = Some(count_new_alerts(lab, o.downloads, &mut seen)?);
    }
    std::thread::sleep(Duration::from_millis(200));
    let events = agent_events(lab, &name);
    let first = events
        .iter()
        .filter(|e| {
            e["applied_at_us"]
                .as_u64()
                .is_some_and(|a| a >= killed_at_us)
        })
        .min_by_key(|e| e["applied_at_us"].as_u64());
    Ok(FailoverReport {
        time_ratio: killed.total_s / baseline.total_s,
        kill_to_moved_ms: first
            .and_then(|e| e["applied_at_us"].as_u64())
            .map(|a| (a - killed_at_us) as f64 / 1e3),
        detected_by: first.and_then(|e| e["reason"].as_str().map(String::from)),
        baseline,
        killed,
        agent_events: events,
        instance: name,
    })
}

/// Prints a report as text.
pub fn print_failover(r: &FailoverReport) {
    for run in [&r.baseline, &r.killed] {
        println!(
            "{:<16} {:>4} identical, {:>4} failed, {:>6.2} s",
            run.label, run.identical, run.failed, run.total_s
        );
        for f in &run.failures {
            println!("                 {f}");
        }
        if let Some(a) = &run.alerts {
            println!(
                "                 IPS alerts: {} of {} requests alerted exactly once, {} more than once, {} not at all",
                a.once, a.requests, a.duplicated, a.missing
            );
        }
    }
    println!(
        "killed {}: total time {:.2}x the run without failure (StatelessNF: within 10%)",
        r.instance, r.time_ratio
    );
    match (&r.kill_to_moved_ms, &r.detected_by) {
        (Some(ms), Some(by)) => {
            println!("traffic moved {ms:.1} ms after the SIGKILL (noticed by: {by})")
        }
        _ => println!("no agent recorded a failover after the SIGKILL"),
    }
    for e in &r.agent_events {
        println!("agent failover record: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::AlertCount;
    use serde_json::json;

    #[test]
    fn alerts_are_counted_per_flow_against_the_requests() {
        let a = |port: u16| json!({"src_ip": "198.51.100.10", "src_port": port, "alert": {"signature_id": 1}});
        // Flow 1 once, flow 2 twice, flow 3 once; five requests.
        let got = AlertCount::of(5, &[a(1), a(2), a(2), a(3)]);
        assert_eq!(
            got,
            AlertCount {
                requests: 5,
                once: 2,
                duplicated: 1,
                missing: 2
            }
        );
        // Same port from another address is another flow.
        let mut other = a(1);
        other["src_ip"] = json!("198.51.100.11");
        assert_eq!(AlertCount::of(2, &[a(1), other]).once, 2);
    }
}
