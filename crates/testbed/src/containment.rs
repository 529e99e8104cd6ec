//! Seawall §4 on the testbed: a host whose agent ignores congestion feedback
//! is detected by the hosts it floods, contained by the controller once two
//! of them accuse it, and fenced off the fabric by the switch; a host under
//! heavy legitimate load never is.
//!
//! Figure 4's tenant on four hosts (`Lab` puts the gateway and `web-b2` on
//! host 1, `web-a1` on 2, `web-a2` on 3, `web-b1` on 4). The links into hosts
//! 4 and 1 are limited with `tc tbf`. The victim `web-a1` sends one TCP flow
//! to each of `web-b1` and `web-b2` the whole run; after a
//! quiet start, `web-a2` on host 3 floods both with UDP. In the attack run
//! host 3's agent runs without Seawall (it ignores feedback, and sends
//! unnumbered Geneve); every other agent runs Seawall and audits its peers.
//! The harness plays the datacenter's switch: once the controller reports
//! host 3 contained, it takes host 3's bridge port down ([`Lab::fence`]). Two
//! control runs have nobody subverted: `web-a2` sends the same UDP flood
//! (which host 3's Seawall holds to its share), or many TCP flows; nothing
//! may be contained in either.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::isolation::{finish_by, per_second, spawn_in, spawn_netns};
use crate::lab::{http, other, Lab, LabError};

/// The VM whose throughput is watched.
pub const VICTIM: &str = "web-a1";
/// The VM on the subverted (or heavily loaded) host.
pub const ATTACKER: &str = "web-a2";
/// The receivers: one on each congested host.
pub const RECEIVERS: [&str; 2] = ["web-b1", "web-b2"];

/// Seconds per report of the victim's receiver.
pub const DT: f64 = 0.1;

/// What to run.
#[derive(Debug, Clone, Serialize)]
pub struct ContainmentOptions {
    /// Rate of the links into the receivers' hosts, Mbit/s.
    pub bottleneck_mbit: u32,
    /// The flood's rate toward each receiver, Mbit/s.
    pub udp_mbit: u32,
    /// TCP flows per receiver in the control run.
    pub tcp_flows: usize,
    /// Seconds the victim sends.
    pub seconds: u32,
    /// Seconds before the attack starts.
    pub quiet: u32,
}

impl Default for ContainmentOptions {
    fn default() -> ContainmentOptions {
        ContainmentOptions {
            bottleneck_mbit: 100,
            udp_mbit: 300,
            tcp_flows: 16,
            seconds: 12,
            quiet: 3,
        }
    }
}

/// One run's measurements.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// What the host of `web-a2` did.
    pub kind: Kind,
    /// Seconds from the attack's start to the first accusation the
    /// controller heard (None: none).
    pub detect_s: Option<f64>,
    /// Seconds from the attack's start to containment (None: not contained).
    pub contain_s: Option<f64>,
    /// The hosts contained during the run.
    pub contained: Vec<u32>,
    /// The victim's Mbit/s toward `web-b1`, every [`DT`] seconds.
    pub victim_mbps: Vec<f64>,
    /// Its mean before the attack; from the attack's start to containment
    /// (never contained: over the attack's seconds after its first); and
    /// from one second after containment to the end (Mbit/s).
    pub before_mbps: f64,
    /// See `before_mbps`.
    pub during_mbps: f64,
    /// See `before_mbps` (None: not contained).
    pub after_mbps: Option<f64>,
    /// Seconds from containment until the victim's rate was back to 80% of
    /// its rate before the attack (None: never, or not contained).
    pub recover_s: Option<f64>,
}

/// Both runs.
#[derive(Debug, Clone, Serialize)]
pub struct ContainmentReport {
    /// The options.
    pub options: ContainmentOptions,
    /// The attack and the control run.
    pub runs: Vec<Run>,
}

/// The controller's containment state.
fn containment(lab: &Lab) -> Result<serde_json::Value, LabError> {
    let st = lab.state();
    let text = http(
        st,
        "GET",
        &format!("{}/v1/containment", st.controller),
        None,
    )?;
    serde_json::from_str(&text).map_err(other)
}

fn host_of(lab: &Lab, vm: &str) -> Result<u32, LabError> {
    lab.state()
        .vm(vm)
        .map(|v| v.host)
        .ok_or_else(|| other(format!("the spec has no VM `{vm}`")))
}

fn addr_of(lab: &Lab, vm: &str) -> Result<String, LabError> {
    lab.state()
        .vm(vm)
        .and_then(|v| v.addrs.first().cloned())
        .ok_or_else(|| other(format!("the spec has no VM `{vm}`")))
}

/// What `web-a2`'s host does in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// Its agent ignores feedback (runs without Seawall); UDP flood.
    Attack,
    /// The same attack, but the switch does not fence a contained host: what
    /// the receivers' own sandbox and the controller achieve alone (the
    /// flood still fills the links into the receivers' hosts).
    AttackUnfenced,
    /// An honest agent (Seawall on); the same UDP flood, which Seawall holds
    /// to the VM's share.
    HonestUdp,
    /// An honest agent; many TCP flows per receiver.
    HonestTcp,
}

impl Kind {
    /// Every kind, in the order the experiment runs them.
    pub const ALL: [Kind; 4] = [
        Kind::Attack,
        Kind::AttackUnfenced,
        Kind::HonestUdp,
        Kind::HonestTcp,
    ];

    /// Whether the host of `web-a2` is subverted.
    pub fn subverted(self) -> bool {
        matches!(self, Kind::Attack | Kind::AttackUnfenced)
    }

    /// The name printed in reports.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Attack => "attack",
            Kind::AttackUnfenced => "unfenced",
            Kind::HonestUdp => "honest-udp",
            Kind::HonestTcp => "honest-tcp",
        }
    }
}

/// One run on `lab` (its links already limited; for a kind that is
/// [`Kind::subverted`], host 3's agent started without Seawall).
pub fn run(lab: &Lab, kind: Kind, o: &ContainmentOptions) -> Result<Run, LabError> {
    let attacker_host = host_of(lab, ATTACKER)?;
    let secs = o.seconds.max(o.quiet + 3);
    // Servers: the victim's (one per receiver) and the attacker's.
    let mut servers = Vec::new();
    for (i, r) in RECEIVERS.iter().enumerate() {
        servers.push(spawn_in(
            lab,
            r,
            &[
                "iperf3",
                "-s",
                "-1",
                "-J",
                "-i",
                &DT.to_string(),
                "-p",
                &format!("{}", 5301 + i),
            ],
        )?);
        servers.push(spawn_in(
            lab,
            r,
            &["iperf3", "-s", "-1", "-p", &format!("{}", 5401 + i)],
        )?);
    }
    // A subverted host does not stop because the controller says so: once
    // contained, it floods the receivers' hosts straight from its underlay
    // address, past its own agent. Their servers listen from the start.
    let host_ns = |h: u32| {
        lab.state()
            .hosts
            .iter()
            .find(|x| x.id == h)
            .map(|x| (x.netns.clone(), x.underlay.to_string()))
            .ok_or_else(|| other(format!("the lab has no host {h}")))
    };
    if kind.subverted() {
        for (i, r) in RECEIVERS.iter().enumerate() {
            let (ns, _) = host_ns(host_of(lab, r)?)?;
            servers.push(spawn_netns(
                &ns,
                &["iperf3", "-s", "-1", "-p", &format!("{}", 5501 + i)],
            )?);
        }
    }
    std::thread::sleep(Duration::from_millis(400));
    let t = secs.to_string();
    let mut clients = Vec::new();
    for (i, r) in RECEIVERS.iter().enumerate() {
        let a = addr_of(lab, r)?;
        clients.push(spawn_in(
            lab,
            VICTIM,
            &["iperf3", "-c", &a, "-p", &format!("{}", 5301 + i), "-t", &t],
        )?);
    }
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(u64::from(o.quiet)));
    let attack_at = Instant::now();
    let left = (secs - o.quiet).to_string();
    let rate = format!("{}M", o.udp_mbit);
    let flows = o.tcp_flows.max(1).to_string();
    let mut aggressors = Vec::new();
    for (i, r) in RECEIVERS.iter().enumerate() {
        let a = addr_of(lab, r)?;
        let port = format!("{}", 5401 + i);
        let args: Vec<&str> = if kind != Kind::HonestTcp {
            vec![
                "iperf3", "-c", &a, "-p", &port, "-u", "-b", &rate, "-l", "1400", "-t", &left,
            ]
        } else {
            vec!["iperf3", "-c", &a, "-p", &port, "-P", &flows, "-t", &left]
        };
        aggressors.push(spawn_in(lab, ATTACKER, &args)?);
    }
    // Watch the controller as the switch manager would.
    let (mut detect, mut contain) = (None, None);
    let mut contained: Vec<u32> = Vec::new();
    let end = started + Duration::from_secs(u64::from(secs));
    while Instant::now() < end {
        if let Ok(c) = containment(lab) {
            let accused = c["accusations"].as_array().is_some_and(|a| !a.is_empty());
            if accused && detect.is_none() {
                detect = Some(attack_at.elapsed().as_secs_f64());
            }
            for h in c["contained"].as_array().into_iter().flatten() {
                let Some(h) = h.as_u64().map(|h| h as u32) else {
                    continue;
                };
                if !contained.contains(&h) {
                    contained.push(h);
                    if h == attacker_host && contain.is_none() {
                        contain = Some(attack_at.elapsed().as_secs_f64());
                        let (ns, _) = host_ns(h)?;
                        // Past the run's end: the harness stops it.
                        let left = end.saturating_duration_since(Instant::now()).as_secs() + 5;
                        for (i, r) in RECEIVERS.iter().enumerate() {
                            let (_, to) = host_ns(host_of(lab, r)?)?;
                            aggressors.push(spawn_netns(
                                &ns,
                                &[
                                    "iperf3",
                                    "-c",
                                    &to,
                                    "-p",
                                    &format!("{}", 5501 + i),
                                    "-u",
                                    "-b",
                                    &rate,
                                    "-l",
                                    "1400",
                                    "-t",
                                    &left.to_string(),
                                ],
                            )?);
                        }
                    }
                    if kind != Kind::AttackUnfenced {
                        lab.fence(h)?;
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // The victim's iperf3s end on their own; the aggressor's, cut off the
    // fabric by the fence, would wait for their peers forever.
    let grace = Instant::now() + Duration::from_secs(8);
    for c in aggressors {
        let _ = finish_by(c, Instant::now(), "iperf3 client");
    }
    for c in clients {
        let _ = finish_by(c, grace, "iperf3 client");
    }
    let mut victim = Vec::new();
    for (i, s) in servers.into_iter().enumerate() {
        // Servers 0 and 2 are the victim's; the others the aggressor's.
        let by = if i == 0 || i == 2 {
            grace
        } else {
            Instant::now()
        };
        let out = finish_by(s, by, "iperf3 server")?;
        if i == 0 {
            victim = per_second(&out)?;
        }
    }
    // The victim's server reports every DT seconds; interval k covers
    // [k·DT, (k+1)·DT) from the victim's start.
    let at = |k: usize| k as f64 * DT;
    let mean = |from: f64, to: f64| {
        let xs: Vec<f64> = victim
            .iter()
            .enumerate()
            .filter(|(k, _)| at(*k) < to && at(*k + 1) > from)
            .map(|(_, v)| *v)
            .collect();
        if xs.is_empty() {
            0.0
        } else {
            xs.iter().sum::<f64>() / xs.len() as f64
        }
    };
    let q = f64::from(o.quiet);
    let end = f64::from(secs);
    // The first second is ramp-up.
    let before = mean(1.0, q);
    let c_at = contain.map(|c| q + c);
    // From the attack's start to containment (never contained: the attack's
    // seconds after its first).
    let during = match c_at {
        Some(c) => mean(q, c),
        None => mean(q + 1.0, end),
    };
    let after = c_at.map(|c| mean(c + 1.0, end));
    let recover = c_at.and_then(|c| {
        victim
            .iter()
            .enumerate()
            .find(|(k, v)| at(*k) >= c && **v >= 0.8 * before)
            .map(|(k, _)| at(k + 1) - c)
    });
    Ok(Run {
        kind,
        detect_s: detect,
        contain_s: contain,
        contained,
        victim_mbps: victim,
        before_mbps: before,
        during_mbps: during,
        after_mbps: after,
        recover_s: recover,
    })
}

/// Limits the links into the receivers' hosts of `lab`.
pub fn limit(lab: &Lab, o: &ContainmentOptions) -> Result<(), LabError> {
    for r in RECEIVERS {
        lab.limit_link_into(host_of(lab, r)?, o.bottleneck_mbit, 128)?;
    }
    Ok(())
}

/// Prints a report.
pub fn print(r: &ContainmentReport) {
    println!(
        "links into web-b1's and web-b2's hosts {} Mbit/s; victim web-a1: 1 TCP flow to each; \
         web-a2 from second {}: UDP {} Mbit/s to each (attack: its host ignores feedback; \
         unfenced: the same, the switch leaves it on the fabric; honest-udp: its host runs Seawall), \
         or {} TCP flows to each (honest-tcp)",
        r.options.bottleneck_mbit, r.options.quiet, r.options.udp_mbit, r.options.tcp_flows
    );
    println!("run          detect_s  contain_s  contained  before  during   after  recover_s");
    for x in &r.runs {
        let f = |v: Option<f64>, p: usize| v.map_or("-".to_string(), |v| format!("{v:.p$}"));
        println!(
            "{:<12} {:>8} {:>10} {:>10} {:>7.1} {:>7.1} {:>7} {:>10}",
            x.kind.name(),
            f(x.detect_s, 2),
            f(x.contain_s, 2),
            format!("{:?}", x.contained),
            x.before_mbps,
            x.during_mbps,
            f(x.after_mbps, 1),
            f(x.recover_s, 2)
        );
    }
}
