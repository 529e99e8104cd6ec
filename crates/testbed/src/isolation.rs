//! Seawall on the testbed: one tenant VM's TCP download against a VM that
//! floods UDP or opens many TCP connections, over a congested link into one
//! host, with the agents' rate control off and on (Seawall §3.1, Fig. 1-2).
//!
//! Figure 4's VMs: the victim `web-a1` (host 2) and the aggressor `web-a2`
//! (host 3) both send to `web-b1` (host 1), traffic in no chain, so it crosses
//! the senders' agents, the fabric and host 1's agent. The fabric port into
//! host 1 is limited with `tc tbf` ([`Lab::limit_link_into`]): the shared
//! bottleneck. iperf3 servers in `web-b1` measure what arrives, second by
//! second; the shares are taken over the seconds both senders ran.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::lab::{other, Lab, LabError};

/// What to run.
#[derive(Debug, Clone, Serialize)]
pub struct IsolationOptions {
    /// Rate of the link into the receiving host, Mbit/s.
    pub bottleneck_mbit: u32,
    /// Its queue, KiB.
    pub queue_kb: u32,
    /// The UDP aggressor's sending rate, Mbit/s.
    pub udp_mbit: u32,
    /// The TCP aggressor's connections.
    pub tcp_flows: usize,
    /// Seconds both senders run (the first is not counted).
    pub seconds: u32,
    /// Seawall weight of the victim VM (its own service in the spec when
    /// not 1; see [`weighted_spec`]).
    pub victim_weight: u16,
}

impl Default for IsolationOptions {
    fn default() -> IsolationOptions {
        IsolationOptions {
            bottleneck_mbit: 100,
            queue_kb: 128,
            udp_mbit: 300,
            tcp_flows: 16,
            seconds: 6,
            victim_weight: 1,
        }
    }
}

/// What one contest measured.
#[derive(Debug, Clone, Serialize)]
pub struct Contest {
    /// Whether the agents ran Seawall.
    pub seawall: bool,
    /// `alone`, `udp` or `tcp`.
    pub aggressor: String,
    /// The victim's goodput at the receiver, Mbit/s (mean over the counted seconds).
    pub victim_mbps: f64,
    /// The aggressor's, Mbit/s.
    pub aggressor_mbps: f64,
    /// victim / (victim + aggressor).
    pub victim_share: f64,
    /// Jain's index of the two VMs' goodput per unit of weight (1 = shares
    /// in proportion to the weights).
    pub jain: f64,
    /// (victim + aggressor) / bottleneck.
    pub utilisation: f64,
    /// The aggressor's packets its agent dropped (over its rate, queue full).
    pub aggressor_policed: u64,
    /// The victim's packets that waited in its agent's queue.
    pub victim_queued: u64,
    /// Rate decreases of the victim's and the aggressor's controllers.
    pub decreases: (u64, u64),
}

/// Both settings, every aggressor.
#[derive(Debug, Clone, Serialize)]
pub struct IsolationReport {
    /// The options.
    pub options: IsolationOptions,
    /// One row per (setting, aggressor).
    pub contests: Vec<Contest>,
}

const SERVER: &str = "web-b1";
const VICTIM: &str = "web-a1";
const AGGRESSOR: &str = "web-a2";
const VICTIM_PORT: &str = "5201";
const AGGRESSOR_PORT: &str = "5202";

/// Runs `cmd` in VM `vm`'s namespace in the background, its stdout captured.
pub(crate) fn spawn_in(lab: &Lab, vm: &str, cmd: &[&str]) -> Result<Child, LabError> {
    let v = lab
        .state()
        .vm(vm)
        .ok_or_else(|| other(format!("the spec has no VM `{vm}`")))?;
    spawn_netns(&v.netns, cmd)
}

/// Runs `cmd` in namespace `netns` in the background, its stdout captured.
pub(crate) fn spawn_netns(netns: &str, cmd: &[&str]) -> Result<Child, LabError> {
    Command::new("ip")
        .args(["netns", "exec", netns])
        .args(cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| other(format!("cannot run {} in {netns}: {e}", cmd[0])))
}

/// Received Mbit/s of each second, from an iperf3 server's JSON.
pub(crate) fn per_second(json: &str) -> Result<Vec<f64>, LabError> {
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| other(format!("iperf3 printed no JSON: {e}")))?;
    let iv = v["intervals"]
        .as_array()
        .ok_or_else(|| other("iperf3 printed no intervals"))?;
    Ok(iv
        .iter()
        .filter_map(|i| i["sum"]["bits_per_second"].as_f64())
        .map(|b| b / 1e6)
        .collect())
}

pub(crate) fn finish(c: Child, what: &str) -> Result<String, LabError> {
    let out = c
        .wait_with_output()
        .map_err(|e| other(format!("{what}: {e}")))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Like [`finish`], but kills the process if it is still running at `by`:
/// an iperf3 whose peer was cut off the fabric waits for it forever. Its
/// output so far is returned either way.
pub(crate) fn finish_by(mut c: Child, by: Instant, what: &str) -> Result<String, LabError> {
    loop {
        match c.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < by => std::thread::sleep(Duration::from_millis(50)),
            Ok(None) => {
                let _ = c.kill();
                break;
            }
            Err(e) => return Err(other(format!("{what}: {e}"))),
        }
    }
    finish(c, what)
}

/// The agent status of the host VM `vm` is on.
fn status_of(lab: &Lab, vm: &str) -> Option<sluice_proto::AgentStatus> {
    let h = lab.state().vm(vm)?.host;
    let api = &lab.state().hosts.iter().find(|x| x.id == h)?.api;
    lab.state()
        .http()
        .get(&format!("{api}/v1/status"))
        .timeout(Duration::from_secs(5))
        .call()
        .ok()?
        .into_json()
        .ok()
}

/// The Seawall counters of `vm`'s traffic to the server's host.
fn entity(lab: &Lab, vm: &str) -> sluice_proto::IsolationStatus {
    let dest = lab.state().vm(SERVER).map(|v| v.host).unwrap_or_default();
    status_of(lab, vm)
        .and_then(|s| {
            s.isolation
                .into_iter()
                .find(|e| e.name == vm && e.dest_host == dest)
        })
        .unwrap_or_default()
}

/// One contest on a lab whose link into the server's host is limited.
pub fn contest(lab: &Lab, aggressor: &str, o: &IsolationOptions) -> Result<Contest, LabError> {
    let server_addr = lab
        .state()
        .vm(SERVER)
        .and_then(|v| v.addrs.first().cloned())
        .ok_or_else(|| other(format!("the spec has no VM `{SERVER}`")))?;
    let before = (entity(lab, VICTIM), entity(lab, AGGRESSOR));
    let secs = o.seconds.max(2).to_string();
    let vs = spawn_in(
        lab,
        SERVER,
        &["iperf3", "-s", "-1", "-J", "-p", VICTIM_PORT],
    )?;
    let as_ = if aggressor == "alone" {
        None
    } else {
        Some(spawn_in(
            lab,
            SERVER,
            &["iperf3", "-s", "-1", "-J", "-p", AGGRESSOR_PORT],
        )?)
    };
    std::thread::sleep(Duration::from_millis(400));
    let flows = o.tcp_flows.max(1).to_string();
    let udp_rate = format!("{}M", o.udp_mbit);
    let ac = match aggressor {
        "alone" => None,
        "udp" => Some(spawn_in(
            lab,
            AGGRESSOR,
            &[
                "iperf3",
                "-c",
                &server_addr,
                "-p",
                AGGRESSOR_PORT,
                "-u",
                "-b",
                &udp_rate,
                "-l",
                "1400",
                "-t",
                &secs,
            ],
        )?),
        "tcp" => Some(spawn_in(
            lab,
            AGGRESSOR,
            &[
                "iperf3",
                "-c",
                &server_addr,
                "-p",
                AGGRESSOR_PORT,
                "-P",
                &flows,
                "-t",
                &secs,
            ],
        )?),
        x => return Err(other(format!("unknown aggressor `{x}` (alone, udp, tcp)"))),
    };
    let vc = spawn_in(
        lab,
        VICTIM,
        &["iperf3", "-c", &server_addr, "-p", VICTIM_PORT, "-t", &secs],
    )?;
    finish(vc, "victim iperf3")?;
    if let Some(c) = ac {
        finish(c, "aggressor iperf3")?;
    }
    let v = per_second(&finish(vs, "victim's iperf3 server")?)?;
    let a = match as_ {
        Some(s) => per_second(&finish(s, "aggressor's iperf3 server")?)?,
        None => Vec::new(),
    };
    // Both started within a few milliseconds; the first second is ramp-up.
    let n = v.len().min(if a.is_empty() { v.len() } else { a.len() });
    if n < 2 {
        return Err(other("iperf3 reported fewer than two seconds"));
    }
    let mean = |x: &[f64]| x[1..n].iter().sum::<f64>() / (n - 1) as f64;
    let vm = mean(&v);
    let am = if a.is_empty() { 0.0 } else { mean(&a) };
    let after = (entity(lab, VICTIM), entity(lab, AGGRESSOR));
    let total = vm + am;
    // Over goodput per unit of weight: 1 when the shares follow the weights.
    let vw = vm / f64::from(o.victim_weight.max(1));
    let jain = if a.is_empty() || total == 0.0 {
        1.0
    } else {
        (vw + am) * (vw + am) / (2.0 * (vw * vw + am * am))
    };
    Ok(Contest {
        seawall: lab_seawall(lab),
        aggressor: aggressor.to_string(),
        victim_mbps: vm,
        aggressor_mbps: am,
        victim_share: if total > 0.0 { vm / total } else { 0.0 },
        jain,
        utilisation: total / o.bottleneck_mbit as f64,
        aggressor_policed: after.1.policed_packets - before.1.policed_packets,
        victim_queued: after.0.queued_packets - before.0.queued_packets,
        decreases: (
            after.0.decreases - before.0.decreases,
            after.1.decreases - before.1.decreases,
        ),
    })
}

fn lab_seawall(lab: &Lab) -> bool {
    status_of(lab, VICTIM).is_some_and(|s| s.seawall)
}

/// Every aggressor on one lab (limits its link first).
pub fn contests(lab: &Lab, o: &IsolationOptions) -> Result<Vec<Contest>, LabError> {
    let host = lab
        .state()
        .vm(SERVER)
        .map(|v| v.host)
        .ok_or_else(|| other(format!("the spec has no VM `{SERVER}`")))?;
    for vm in [VICTIM, AGGRESSOR] {
        if lab.state().vm(vm).map(|v| v.host) == Some(host) {
            return Err(other(format!(
                "{vm} is on the server's host; the experiment needs them apart"
            )));
        }
    }
    lab.limit_link_into(host, o.bottleneck_mbit, o.queue_kb)?;
    let mut out = Vec::new();
    for a in ["alone", "udp", "tcp"] {
        out.push(contest(lab, a, o)?);
    }
    Ok(out)
}

/// The spec `text` with the victim VM moved out of its service into a service
/// of its own with `weight` (the aggressor stays in the old one, weight 1), so
/// the two can weigh differently. Works on specs shaped like
/// examples/tenant/figure4.yaml (a service listing `web-a1` and `web-a2`).
pub fn weighted_spec(text: &str, weight: u16) -> Result<String, LabError> {
    let mut doc: yaml_serde::Value =
        yaml_serde::from_str(text).map_err(|e| other(format!("spec: {e}")))?;
    let elements = doc
        .get_mut("elements")
        .and_then(|e| e.as_mapping_mut())
        .ok_or_else(|| other("spec has no elements"))?;
    let mut addr = None;
    for (_, e) in elements.iter_mut() {
        if let Some(vms) = e.get_mut("vms").and_then(|v| v.as_mapping_mut()) {
            if vms.contains_key(AGGRESSOR) {
                addr = vms.remove(VICTIM);
            }
        }
    }
    let addr = addr.ok_or_else(|| {
        other(format!(
            "spec has no service listing both {VICTIM} and {AGGRESSOR}"
        ))
    })?;
    let mut vms = yaml_serde::Mapping::new();
    vms.insert(VICTIM.into(), addr);
    let mut svc = yaml_serde::Mapping::new();
    svc.insert("type".into(), "service".into());
    svc.insert("weight".into(), u64::from(weight).into());
    svc.insert("vms".into(), vms.into());
    elements.insert("isolation-victim".into(), svc.into());
    yaml_serde::to_string(&doc).map_err(|e| other(format!("spec: {e}")))
}

/// Prints the report as a table.
pub fn print(r: &IsolationReport) {
    let o = &r.options;
    println!(
        "bottleneck {} Mbit/s ({} KiB queue) into web-b1's host; victim web-a1: 1 TCP flow, weight {}; aggressor web-a2: UDP at {} Mbit/s or {} TCP flows, weight 1; {} s each, the first not counted",
        o.bottleneck_mbit, o.queue_kb, o.victim_weight, o.udp_mbit, o.tcp_flows, o.seconds
    );
    println!(
        "{:<8} {:<9} {:>9} {:>9} {:>7} {:>6} {:>6} {:>10} {:>9} {:>9}",
        "seawall",
        "aggressor",
        "victim",
        "aggr.",
        "share",
        "jain",
        "util",
        "aggr.drop",
        "v.queued",
        "decr v/a"
    );
    for c in &r.contests {
        println!(
            "{:<8} {:<9} {:>9.1} {:>9.1} {:>7.2} {:>6.2} {:>6.2} {:>10} {:>9} {:>9}",
            if c.seawall { "on" } else { "off" },
            c.aggressor,
            c.victim_mbps,
            c.aggressor_mbps,
            c.victim_share,
            c.jain,
            c.utilisation,
            c.aggressor_policed,
            c.victim_queued,
            format!("{}/{}", c.decreases.0, c.decreases.1)
        );
    }
    let w = f64::from(o.victim_weight.max(1));
    println!(
        "(Mbit/s received by web-b1; share = victim / both; the weighted fair share is {:.2})",
        w / (w + 1.0)
    );
}
