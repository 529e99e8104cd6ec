//! `sluice experiment chaos` (issue 22): one component at a time is killed
//! or stopped under load, and what users would see is measured.
//!
//! The load is Figure 4's east-to-a chain (firewall, IPS, lb-a, web-a):
//! paced long downloads of the 1 MiB test object from the gateway to the
//! web-a VIP, checked byte for byte at the end, and a prober that opens a new
//! connection (an HTTP GET of a small page through the same chain) every
//! 100 ms. Per fault and repetition: fresh downloads start and are
//! established, the fault is injected, the harness waits until the
//! component is back and the lab in sync again, the downloads finish.
//!
//! Per fault it reports: established connections lost (downloads that had
//! bytes before the fault and did not arrive whole), the window in which
//! new connections failed, the time to full recovery and failovers the
//! agents made that the fault does not explain (false failovers). A soak
//! runs the same load without faults and counts failovers, every one of
//! them false. Raw timestamps become those numbers in [`measure`] and
//! [`summarize`], pure and tested on synthetic timelines.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::lab::{http, other, Lab, LabError, StoreKind, CLUSTER_PRIMARIES};

/// A component kind the experiment kills or stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// SIGKILL of an NF instance process of the probed chain.
    Instance,
    /// SIGKILL of a host's agent (its supervisor starts it again).
    Agent,
    /// SIGSTOP of a host's agent for [`ChaosOptions::stop_for`], then SIGCONT:
    /// a hung agent, not a dead one.
    AgentStop,
    /// SIGKILL of the controller, started again after
    /// [`ChaosOptions::controller_down`].
    Controller,
    /// SIGKILL of the state store primary holding the most keys (needs the
    /// cluster store); its replica takes over.
    StorePrimary,
    /// SIGKILL of an etcd member under replicated controllers (needs
    /// `--controllers 3`), started again after
    /// [`ChaosOptions::controller_down`].
    EtcdMember,
}

impl Fault {
    /// Every fault, in the order a run injects them.
    pub const ALL: [Fault; 6] = [
        Fault::Instance,
        Fault::Agent,
        Fault::AgentStop,
        Fault::Controller,
        Fault::StorePrimary,
        Fault::EtcdMember,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Fault::Instance => "instance",
            Fault::Agent => "agent",
            Fault::AgentStop => "agent-stop",
            Fault::Controller => "controller",
            Fault::StorePrimary => "store-primary",
            Fault::EtcdMember => "etcd-member",
        }
    }

    /// Issue 22's goal for the new-connection failure window, seconds.
    pub fn goal_window_s(self) -> f64 {
        match self {
            Fault::Instance | Fault::Agent | Fault::AgentStop => 1.0,
            Fault::Controller | Fault::EtcdMember => 0.0,
            Fault::StorePrimary => 3.0,
        }
    }

    /// Parses a comma-separated list (`none` or empty: no fault).
    pub fn parse_list(s: &str) -> Result<Vec<Fault>, LabError> {
        let mut out = Vec::new();
        for w in s.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            if w == "none" {
                continue;
            }
            let f = Fault::ALL
                .into_iter()
                .find(|f| f.name() == w)
                .ok_or_else(|| {
                    other(format!(
                        "unknown fault `{w}` (known: instance, agent, agent-stop, controller, \
                         store-primary, etcd-member, none)"
                    ))
                })?;
            if !out.contains(&f) {
                out.push(f);
            }
        }
        Ok(out)
    }
}

/// What to run.
#[derive(Debug, Clone, Serialize)]
pub struct ChaosOptions {
    /// The faults, each repeated [`ChaosOptions::repeat`] times.
    pub faults: Vec<Fault>,
    /// Repetitions per fault.
    pub repeat: u32,
    /// Seconds of load without faults at the end (0: none).
    pub soak_s: u64,
    /// Concurrent paced downloads.
    pub downloads: usize,
    /// Rate of each download, KiB/s (the object is 1 MiB).
    pub rate_kib: u64,
    /// Time between new-connection probes.
    pub probe_interval: Duration,
    /// A probe that has not got its page by then failed (a SYN retransmitted
    /// after a drop comes back one second later: it fails).
    pub probe_timeout: Duration,
    /// How long an agent stays stopped.
    pub stop_for: Duration,
    /// How long the controller stays dead.
    pub controller_down: Duration,
    /// From the downloads being established to the fault.
    pub lead: Duration,
    /// The middleboxes whose instances are killed (in turn).
    pub middleboxes: Vec<String>,
    /// The client address in the gateway VM (Figure 4's clients-east).
    pub client: String,
    /// The service address downloaded from (Figure 4's web-a VIP).
    pub vip: String,
    /// How long a component may take to come back before the run fails.
    pub recover_within: Duration,
}

impl Default for ChaosOptions {
    fn default() -> ChaosOptions {
        ChaosOptions {
            faults: Fault::ALL.to_vec(),
            repeat: 3,
            soak_s: 0,
            downloads: 8,
            rate_kib: 256,
            probe_interval: Duration::from_millis(100),
            probe_timeout: Duration::from_secs(1),
            stop_for: Duration::from_secs(2),
            controller_down: Duration::from_secs(1),
            lead: Duration::from_millis(1000),
            middleboxes: vec!["fw".into(), "ips".into(), "lb-a".into()],
            client: "198.51.100.10".into(),
            vip: "10.10.1.100".into(),
            recover_within: Duration::from_secs(30),
        }
    }
}

/// One new-connection probe (seconds since the run started).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Probe {
    /// When it started.
    pub start: f64,
    /// When it ended (success, error or timeout).
    pub end: f64,
    /// It got the page in time.
    pub ok: bool,
}

/// One long download.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Transfer {
    /// When it had its first bytes (None: never established).
    pub established: Option<f64>,
    /// When curl exited.
    pub end: f64,
    /// Every byte arrived, identical to the served object.
    pub whole: bool,
    /// What went wrong, if anything (curl's exit, bytes received).
    pub detail: String,
}

/// A failover an agent recorded.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Failover {
    /// When the instance became suspect, microseconds since the run started
    /// (negative: before).
    pub at_us: i64,
    /// The host whose agent recorded it.
    pub host: u32,
    /// The instance (`tenant/middlebox/k`).
    pub instance: String,
    /// `heartbeat` or `exited`.
    pub reason: String,
}

/// What a fault hit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Target {
    /// An NF instance (`tenant/middlebox/k`) on a host.
    Instance {
        /// Its name.
        name: String,
        /// Its host.
        host: u32,
    },
    /// A host's agent.
    Host(u32),
    /// The controller (replicated: the leader, by index).
    Controller,
    /// The leading one of replicated controllers, by index.
    Leader(usize),
    /// A store node, by port.
    StoreNode(u16),
    /// An etcd member, by index.
    EtcdMember(usize),
}

impl Target {
    /// Whether the fault explains a failover: the killed instance's own, or
    /// any on the host whose agent died or stopped (its instances were
    /// replaced, or went unheard while it was stopped). The controller and
    /// the store are not on the data path's failure detection: every
    /// failover during their faults is false.
    pub fn explains(&self, f: &Failover) -> bool {
        match self {
            Target::Instance { name, .. } => f.instance == *name,
            Target::Host(h) => f.host == *h,
            Target::Controller
            | Target::Leader(_)
            | Target::StoreNode(_)
            | Target::EtcdMember(_) => false,
        }
    }

    /// A short description.
    pub fn describe(&self) -> String {
        match self {
            Target::Instance { name, host } => format!("{name} on host {host}"),
            Target::Host(h) => format!("agent of host {h}"),
            Target::Controller => "controller".into(),
            Target::Leader(i) => format!("leading controller ctl{i}"),
            Target::StoreNode(p) => format!("store 127.0.0.1:{p}"),
            Target::EtcdMember(i) => format!("etcd member m{i}"),
        }
    }
}

/// One injected fault, as the harness saw it (seconds since the run
/// started).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Injection {
    /// What was done.
    pub fault: Fault,
    /// To what.
    pub target: Target,
    /// The repetition's span: probes and failovers in it belong to it.
    pub from: f64,
    /// See `from`.
    pub to: f64,
    /// When the fault was injected.
    pub at: f64,
    /// When the component was back and the lab in sync (None: not within
    /// [`ChaosOptions::recover_within`]).
    pub back_at: Option<f64>,
}

/// What one fault cost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FaultResult {
    /// The fault.
    pub fault: Fault,
    /// What it hit.
    pub target: String,
    /// Downloads established before the fault.
    pub established: usize,
    /// Of those, the ones that did not arrive whole.
    pub established_lost: usize,
    /// What happened to each lost one.
    pub lost: Vec<String>,
    /// Probes in the repetition.
    pub probes: usize,
    /// Probes that failed.
    pub probes_failed: usize,
    /// From the first failed probe's start to the last one's, plus one
    /// probe interval (0: none failed), seconds.
    pub window_s: f64,
    /// From the fault to the component back, the lab in sync and new
    /// connections working (None: not recovered).
    pub recovery_s: Option<f64>,
    /// Failovers the agents recorded in the repetition.
    pub failovers: usize,
    /// Of those, the ones the fault does not explain.
    pub false_failovers: usize,
}

/// The window of failed probes, seconds: from the first failed start to
/// the last, plus one interval (the probes' resolution). 0 when none failed.
fn failure_window(probes: &[&Probe], interval: f64) -> f64 {
    let mut failed = probes.iter().filter(|p| !p.ok).map(|p| p.start);
    let Some(first) = failed.next() else {
        return 0.0;
    };
    let last = failed.fold(first, f64::max);
    last - first + interval
}

/// The measurements of one injection from the run's raw records.
pub fn measure(
    inj: &Injection,
    probes: &[Probe],
    transfers: &[Transfer],
    failovers: &[Failover],
    interval: f64,
) -> FaultResult {
    let mine: Vec<&Probe> = probes
        .iter()
        .filter(|p| p.start >= inj.from && p.start < inj.to)
        .collect();
    let failed: Vec<&&Probe> = mine.iter().filter(|p| !p.ok).collect();
    let window_s = failure_window(&mine, interval);
    // New connections work again at the end of the first successful probe
    // started after the last failed one.
    let conn_back = match failed.iter().map(|p| p.start).reduce(f64::max) {
        None => Some(inj.at),
        Some(last) => mine
            .iter()
            .filter(|p| p.ok && p.start > last)
            .map(|p| p.end)
            .reduce(f64::min),
    };
    let recovery_s = match (inj.back_at, conn_back) {
        (Some(b), Some(c)) => Some(b.max(c) - inj.at),
        _ => None,
    };
    let established: Vec<&Transfer> = transfers
        .iter()
        .filter(|t| t.established.is_some_and(|e| e <= inj.at))
        .collect();
    let lost: Vec<String> = established
        .iter()
        .filter(|t| !t.whole)
        .map(|t| t.detail.clone())
        .collect();
    let (from_us, to_us) = ((inj.from * 1e6) as i64, (inj.to * 1e6) as i64);
    let seen: Vec<&Failover> = failovers
        .iter()
        .filter(|f| f.at_us >= from_us && f.at_us < to_us)
        .collect();
    FaultResult {
        fault: inj.fault,
        target: inj.target.describe(),
        established: established.len(),
        established_lost: lost.len(),
        lost,
        probes: mine.len(),
        probes_failed: failed.len(),
        window_s,
        recovery_s,
        failovers: seen.len(),
        false_failovers: seen.iter().filter(|f| !inj.target.explains(f)).count(),
    }
}

/// One fault kind over its repetitions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// The fault.
    pub fault: Fault,
    /// Repetitions.
    pub runs: usize,
    /// Established downloads over all repetitions.
    pub established: usize,
    /// Of those lost.
    pub established_lost: usize,
    /// Repetitions that lost any.
    pub runs_losing: usize,
    /// Largest new-connection failure window, seconds.
    pub window_max_s: f64,
    /// Median window, seconds.
    pub window_median_s: f64,
    /// Largest recovery time (None: some repetition did not recover).
    pub recovery_max_s: Option<f64>,
    /// Median recovery time of those that recovered.
    pub recovery_median_s: Option<f64>,
    /// Failovers the faults do not explain.
    pub false_failovers: usize,
    /// The goal for the window, seconds.
    pub goal_window_s: f64,
    /// No established connection lost in any repetition.
    pub lost_goal_met: bool,
    /// Every window within the goal.
    pub window_goal_met: bool,
}

/// The median of `xs` (None when empty).
pub(crate) fn median(mut xs: Vec<f64>) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    Some(if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    })
}

/// The per-kind table, in the order the kinds first appear.
pub fn summarize(results: &[FaultResult]) -> Vec<Summary> {
    let mut kinds: Vec<Fault> = Vec::new();
    for r in results {
        if !kinds.contains(&r.fault) {
            kinds.push(r.fault);
        }
    }
    kinds
        .into_iter()
        .map(|fault| {
            let rs: Vec<&FaultResult> = results.iter().filter(|r| r.fault == fault).collect();
            let windows: Vec<f64> = rs.iter().map(|r| r.window_s).collect();
            let recovered: Vec<f64> = rs.iter().filter_map(|r| r.recovery_s).collect();
            let window_max_s = windows.iter().copied().fold(0.0, f64::max);
            Summary {
                fault,
                runs: rs.len(),
                established: rs.iter().map(|r| r.established).sum(),
                established_lost: rs.iter().map(|r| r.established_lost).sum(),
                runs_losing: rs.iter().filter(|r| r.established_lost > 0).count(),
                window_max_s,
                window_median_s: median(windows).unwrap_or(0.0),
                recovery_max_s: (recovered.len() == rs.len())
                    .then(|| recovered.iter().copied().fold(0.0, f64::max)),
                recovery_median_s: median(recovered),
                false_failovers: rs.iter().map(|r| r.false_failovers).sum(),
                goal_window_s: fault.goal_window_s(),
                lost_goal_met: rs.iter().all(|r| r.established_lost == 0),
                // A hair of slack for float noise, not for the goal.
                window_goal_met: window_max_s <= fault.goal_window_s() + 1e-9,
            }
        })
        .collect()
}

/// The load without faults.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SoakResult {
    /// Its length, seconds.
    pub seconds: f64,
    /// Downloads completed in it.
    pub downloads: usize,
    /// Of those, not whole.
    pub downloads_lost: usize,
    /// Probes.
    pub probes: usize,
    /// Probes that failed.
    pub probes_failed: usize,
    /// Failovers the agents recorded: with nothing failing, all false.
    pub false_failovers: usize,
    /// Those failovers.
    pub failover_events: Vec<Failover>,
    /// The agents' failure-detector counters at its end, summed over hosts
    /// (from their /metrics; what explains or excludes the false failovers).
    pub detector: Vec<(String, u64)>,
    /// Per failover event (same order), how long the instance's heartbeats
    /// had been silent when they resumed, milliseconds (None: not resumed
    /// by the end).
    pub silences_ms: Vec<Option<f64>>,
}

/// The soak's measurements from its span's raw records.
pub fn measure_soak(
    from: f64,
    to: f64,
    probes: &[Probe],
    transfers: &[Transfer],
    failovers: &[Failover],
) -> SoakResult {
    let mine: Vec<&Probe> = probes
        .iter()
        .filter(|p| p.start >= from && p.start < to)
        .collect();
    let (from_us, to_us) = ((from * 1e6) as i64, (to * 1e6) as i64);
    let events: Vec<Failover> = failovers
        .iter()
        .filter(|f| f.at_us >= from_us && f.at_us < to_us)
        .cloned()
        .collect();
    SoakResult {
        seconds: to - from,
        downloads: transfers.len(),
        downloads_lost: transfers.iter().filter(|t| !t.whole).count(),
        probes: mine.len(),
        probes_failed: mine.iter().filter(|p| !p.ok).count(),
        false_failovers: events.len(),
        detector: Vec::new(),
        silences_ms: vec![None; events.len()],
        failover_events: events,
    }
}

/// A whole run.
#[derive(Debug, Clone, Serialize)]
pub struct ChaosReport {
    /// The options.
    pub options: ChaosOptions,
    /// The store the lab ran.
    pub store: StoreKind,
    /// Every fault injected.
    pub faults: Vec<FaultResult>,
    /// Per fault kind.
    pub summary: Vec<Summary>,
    /// The soak (None: not run).
    pub soak: Option<SoakResult>,
    /// How many controllers the lab ran (more than 1: on etcd, one
    /// leading).
    pub controllers: usize,
}

impl ChaosReport {
    /// Every goal measured was met.
    pub fn goals_met(&self) -> bool {
        self.summary
            .iter()
            .all(|s| s.lost_goal_met && s.window_goal_met)
            && self.soak.as_ref().is_none_or(|s| s.false_failovers == 0)
    }
}

/// The run's clock: seconds since its start, and Unix microseconds for the
/// agents' records.
#[derive(Debug, Clone, Copy)]
struct Clock {
    t0: Instant,
    t0_us: i64,
}

impl Clock {
    fn new() -> Clock {
        Clock {
            t0: Instant::now(),
            t0_us: unix_us(),
        }
    }

    fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }
}

fn unix_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// The prober: a new connection every interval, each a curl in the gateway
/// VM, open loop (a hung probe does not delay the next).
fn prober(
    netns: String,
    client: String,
    url: String,
    o: (Duration, Duration),
    clock: Clock,
    stop: Arc<AtomicBool>,
) -> Vec<Probe> {
    let (interval, timeout) = o;
    let mut out = Vec::new();
    let mut inflight: Vec<(f64, Child)> = Vec::new();
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) || !inflight.is_empty() {
        if !stop.load(Ordering::Relaxed) && Instant::now() >= next {
            next += interval;
            let start = clock.now();
            let child = Command::new("ip")
                .args(["netns", "exec", &netns, "curl", "-sf", "-o", "/dev/null"])
                .args(["--max-time", &format!("{:.3}", timeout.as_secs_f64())])
                .args(["--interface", &client])
                .arg(&url)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            match child {
                Ok(c) => inflight.push((start, c)),
                // The harness could not start one: not the network's doing.
                Err(e) => eprintln!("chaos: cannot start a probe: {e}"),
            }
        }
        inflight.retain_mut(|(start, c)| match c.try_wait() {
            Ok(Some(st)) => {
                out.push(Probe {
                    start: *start,
                    end: clock.now(),
                    ok: st.success(),
                });
                false
            }
            Ok(None) => true,
            Err(_) => false,
        });
        std::thread::sleep(Duration::from_millis(5));
    }
    out.sort_by(|a, b| a.start.total_cmp(&b.start));
    out
}

/// Polls every agent's failover records, keeping each once.
fn failover_poller(
    agent: ureq::Agent,
    apis: Vec<(u32, String)>,
    clock: Clock,
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<BTreeSet<Failover>>>,
) {
    loop {
        let last = stop.load(Ordering::Relaxed);
        for (host, api) in &apis {
            let Ok(v) = agent
                .get(&format!("{api}/v1/status"))
                .timeout(Duration::from_millis(500))
                .call()
                .map_err(|_| ())
                .and_then(|r| r.into_json::<serde_json::Value>().map_err(|_| ()))
            else {
                continue;
            };
            let mut got = seen.lock().unwrap_or_else(|e| e.into_inner());
            for e in v["failover_events"].as_array().into_iter().flatten() {
                let at = e["suspected_at_us"].as_i64().unwrap_or(0);
                got.insert(Failover {
                    at_us: at - clock.t0_us,
                    host: *host,
                    instance: e["instance"].as_str().unwrap_or("").to_string(),
                    reason: e["reason"].as_str().unwrap_or("").to_string(),
                });
            }
        }
        if last {
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The failure detector's counters of every agent, summed: how often an
/// agent found itself stalled, read its queue before acting on a silence,
/// found the silence explained by what it read, or could not empty it.
fn detector_counters(lab: &Lab) -> Vec<(String, u64)> {
    const FAMILIES: [(&str, &str); 4] = [
        ("sluice_agent_stalls_total", "agent stalls"),
        (
            "sluice_agent_health_confirms_total",
            "queue reads before suspecting",
        ),
        (
            "sluice_agent_health_cleared_total",
            "silences the read explained",
        ),
        (
            "sluice_agent_health_backlogs_total",
            "reads leaving a backlog",
        ),
    ];
    let agent = lab.state().http();
    let mut sums = [0u64; FAMILIES.len()];
    for h in &lab.state().hosts {
        let Ok(text) = agent
            .get(&format!("{}/metrics", h.api))
            .timeout(Duration::from_secs(2))
            .call()
            .map_err(|_| ())
            .and_then(|r| r.into_string().map_err(|_| ()))
        else {
            continue;
        };
        for line in text.lines() {
            for (i, (family, _)) in FAMILIES.iter().enumerate() {
                if line
                    .strip_prefix(family)
                    .is_some_and(|r| r.starts_with('{'))
                {
                    sums[i] += line
                        .rsplit(' ')
                        .next()
                        .and_then(|v| v.parse::<u64>().ok())
                        .unwrap_or(0);
                }
            }
        }
    }
    FAMILIES
        .iter()
        .zip(sums)
        .map(|((_, name), n)| (name.to_string(), n))
        .collect()
}

/// Every agent's failover events that resumed: (suspected at, µs since the
/// run started; host; instance) → how long the instance had been silent, µs.
fn silences(lab: &Lab, clock: Clock) -> BTreeMap<(i64, u32, String), u64> {
    let agent = lab.state().http();
    let mut out = BTreeMap::new();
    for h in &lab.state().hosts {
        let Ok(v) = agent
            .get(&format!("{}/v1/status", h.api))
            .timeout(Duration::from_secs(2))
            .call()
            .map_err(|_| ())
            .and_then(|r| r.into_json::<serde_json::Value>().map_err(|_| ()))
        else {
            continue;
        };
        for e in v["failover_events"].as_array().into_iter().flatten() {
            if let Some(us) = e["silence_us"].as_u64() {
                let at = e["suspected_at_us"].as_i64().unwrap_or(0) - clock.t0_us;
                let inst = e["instance"].as_str().unwrap_or("").to_string();
                out.insert((at, h.id, inst), us);
            }
        }
    }
    out
}

/// A paced download in flight.
struct Download {
    file: PathBuf,
    child: Child,
    established: Option<f64>,
}

fn start_download(lab: &Lab, o: &ChaosOptions, file: &Path) -> Result<Download, LabError> {
    let gw = gateway(lab)?;
    let _ = fs::remove_file(file);
    let child = Command::new("ip")
        .args(["netns", "exec", &gw, "curl", "-sf", "--max-time", "120"])
        .args(["--interface", &o.client, "-o"])
        .arg(file)
        .arg(format!(
            "http://{}/paced/blob?rate={}",
            o.vip,
            o.rate_kib * 1024
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| other(format!("cannot run curl in the gateway: {e}")))?;
    Ok(Download {
        file: file.to_path_buf(),
        child,
        established: None,
    })
}

/// Notes when each download got its first bytes.
fn mark_established(ds: &mut [Download], clock: &Clock) {
    for d in ds.iter_mut().filter(|d| d.established.is_none()) {
        if fs::metadata(&d.file).is_ok_and(|m| m.len() > 0) {
            d.established = Some(clock.now());
        }
    }
}

/// Waits for a download (killing it past `by`) and checks its bytes.
fn finish_download(mut d: Download, by: Instant, clock: &Clock, blob: &[u8]) -> Transfer {
    let status = loop {
        match d.child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if Instant::now() < by => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = d.child.kill();
                let _ = d.child.wait();
                break None;
            }
        }
    };
    let end = clock.now();
    let got = fs::read(&d.file).unwrap_or_default();
    let _ = fs::remove_file(&d.file);
    let whole = status.is_some_and(|s| s.success()) && got == blob;
    Transfer {
        established: d.established,
        end,
        whole,
        detail: if whole {
            String::new()
        } else {
            format!(
                "{}: curl {}, {} of {} bytes{}",
                d.file.display(),
                status.map_or("killed after the deadline".to_string(), |s| s.to_string()),
                got.len(),
                blob.len(),
                if got.len() == blob.len() {
                    " (different bytes)"
                } else {
                    ""
                }
            )
        },
    }
}

fn gateway(lab: &Lab) -> Result<String, LabError> {
    lab.state()
        .vm("gateway")
        .map(|v| v.netns.clone())
        .ok_or_else(|| other("the lab has no gateway VM"))
}

/// An NF instance as the controller reports it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Inst {
    name: String,
    host: u32,
    pid: Option<u32>,
    alive: bool,
}

/// The controller's instances.
fn instances(lab: &Lab) -> Result<Vec<Inst>, LabError> {
    let st = lab.state();
    let text = http(st, "GET", &format!("{}/v1/instances", st.controller), None)?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(other)?;
    Ok(v.as_array()
        .into_iter()
        .flatten()
        .map(|i| Inst {
            name: i["name"].as_str().unwrap_or("").to_string(),
            host: i["host"].as_u64().unwrap_or(0) as u32,
            pid: i["pid"].as_u64().map(|p| p as u32),
            alive: i["alive"].as_bool() == Some(true),
        })
        .collect())
}

/// Every agent runs its desired configuration and every instance is alive
/// (one look; false while the controller does not answer).
fn in_sync(lab: &Lab) -> bool {
    lab.wait_in_sync(Duration::ZERO).is_ok()
}

fn agent_answers(lab: &Lab, host: u32) -> bool {
    let Some(h) = lab.state().hosts.iter().find(|h| h.id == host) else {
        return false;
    };
    lab.state()
        .http()
        .get(&format!("{}/v1/status", h.api))
        .timeout(Duration::from_millis(500))
        .call()
        .ok()
        .and_then(|r| r.into_json::<serde_json::Value>().ok())
        .is_some_and(|s| s["config_version"].as_u64().unwrap_or(0) > 0)
}

/// Sends `sig` to `pid`.
fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) on a process of the lab, found by the harness.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// Continues a stopped agent when dropped, so that an error between SIGSTOP
/// and SIGCONT never leaves it stopped.
struct Continue(u32);

impl Drop for Continue {
    fn drop(&mut self) {
        signal(self.0, libc::SIGCONT);
    }
}

/// A check that a faulted component is back.
type BackCheck = Box<dyn Fn(&Lab) -> bool>;

/// Injects `fault` (repetition `rep`) and returns what it hit and a check
/// that the component is back.
fn inject(
    lab: &mut Lab,
    fault: Fault,
    rep: u32,
    o: &ChaosOptions,
) -> Result<(Target, BackCheck), LabError> {
    let hosts: Vec<u32> = lab.state().hosts.iter().map(|h| h.id).collect();
    let host = hosts[rep as usize % hosts.len()];
    match fault {
        Fault::Instance => {
            let tenant = lab.state().tenant.clone();
            let mut cands: Vec<Inst> = instances(lab)?
                .into_iter()
                .filter(|i| {
                    o.middleboxes
                        .iter()
                        .any(|m| i.name.starts_with(&format!("{tenant}/{m}/")))
                })
                .collect();
            cands.sort();
            if cands.is_empty() {
                return Err(other(format!(
                    "no instance of {} in the lab to kill",
                    o.middleboxes.join(", ")
                )));
            }
            let Inst {
                name, host, pid, ..
            } = cands[rep as usize % cands.len()].clone();
            let pid = pid.ok_or_else(|| other(format!("instance {name} reports no pid")))?;
            signal(pid, libc::SIGKILL);
            let n = name.clone();
            Ok((
                Target::Instance { name, host },
                Box::new(move |lab: &Lab| {
                    instances(lab).is_ok_and(|is| {
                        is.iter()
                            .any(|i| i.name == n && i.alive && i.pid.is_some_and(|p| p != pid))
                    }) && in_sync(lab)
                }),
            ))
        }
        Fault::Agent => {
            let pid = lab.kill_agent(host)?;
            Ok((
                Target::Host(host),
                Box::new(move |lab: &Lab| {
                    lab.agent_pid(host).is_some_and(|p| p != pid)
                        && agent_answers(lab, host)
                        && in_sync(lab)
                }),
            ))
        }
        Fault::AgentStop => {
            let pid = lab
                .agent_pid(host)
                .ok_or_else(|| other(format!("host {host} has no running agent")))?;
            signal(pid, libc::SIGSTOP);
            let cont = Continue(pid);
            std::thread::sleep(o.stop_for);
            drop(cont);
            Ok((
                Target::Host(host),
                Box::new(move |lab: &Lab| agent_answers(lab, host) && in_sync(lab)),
            ))
        }
        Fault::Controller if lab.state().replicas.is_empty() => {
            lab.kill_controller();
            std::thread::sleep(o.controller_down);
            lab.restart_controller()?;
            Ok((Target::Controller, Box::new(in_sync)))
        }
        Fault::Controller => {
            // Replicated: the leader dies; another takes over once its lease
            // runs out, and the killed one comes back as a candidate.
            let killed = lab.kill_leader()?;
            std::thread::sleep(o.controller_down);
            lab.restart_controller()?;
            Ok((Target::Leader(killed), Box::new(in_sync)))
        }
        Fault::EtcdMember => {
            let n = lab.etcd_members();
            if n == 0 {
                return Err(other(
                    "fault `etcd-member` needs replicated controllers on etcd (--controllers 3)",
                ));
            }
            let m = rep as usize % n;
            lab.kill_etcd_member(m)?;
            std::thread::sleep(o.controller_down);
            lab.restart_etcd_member(m)?;
            Ok((Target::EtcdMember(m), Box::new(in_sync)))
        }
        Fault::StorePrimary => {
            if lab.state().store_kind != StoreKind::Cluster {
                return Err(other(
                    "fault `store-primary` needs the replicated store (--store cluster): a \
                     single server's death loses every record by design",
                ));
            }
            let primaries: Vec<u16> = lab.store_primaries().iter().map(|n| n.port).collect();
            let (victim, _) = lab
                .store_keys()
                .into_iter()
                .filter(|(p, _)| primaries.contains(p))
                .max_by_key(|(_, k)| *k)
                .ok_or_else(|| other("no store primary answers"))?;
            lab.kill_store_node(victim)?;
            Ok((
                Target::StoreNode(victim),
                Box::new(move |lab: &Lab| {
                    let now: Vec<u16> = lab.store_primaries().iter().map(|n| n.port).collect();
                    now.len() == CLUSTER_PRIMARIES && !now.contains(&victim) && in_sync(lab)
                }),
            ))
        }
    }
}

/// Polls `check` until it holds or `within` passed; when it held.
fn wait_for(
    lab: &Lab,
    check: &dyn Fn(&Lab) -> bool,
    within: Duration,
    clock: &Clock,
) -> Option<f64> {
    let deadline = Instant::now() + within;
    loop {
        if check(lab) {
            return Some(clock.now());
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs the experiment on `lab` (Figure 4's tenant, web servers on; the
/// cluster store for `store-primary`).
pub fn run(lab: &mut Lab, o: &ChaosOptions) -> Result<ChaosReport, LabError> {
    if o.faults.contains(&Fault::StorePrimary) && lab.state().store_kind != StoreKind::Cluster {
        return Err(other(
            "fault `store-primary` needs the replicated store (--store cluster)",
        ));
    }
    let gw = gateway(lab)?;
    let work = lab.state().dir.join("chaos");
    fs::create_dir_all(&work).map_err(|e| other(format!("{}: {e}", work.display())))?;
    let blob = crate::lab::blob();
    lab.wait_in_sync(o.recover_within)?;

    let clock = Clock::new();
    let stop = Arc::new(AtomicBool::new(false));
    let events = Arc::new(Mutex::new(BTreeSet::new()));
    let prober = {
        let (stop, url) = (stop.clone(), format!("http://{}/index.html", o.vip));
        let (gw, client, t) = (
            gw.clone(),
            o.client.clone(),
            (o.probe_interval, o.probe_timeout),
        );
        std::thread::spawn(move || prober(gw, client, url, t, clock, stop))
    };
    let poller = {
        let apis = lab
            .state()
            .hosts
            .iter()
            .map(|h| (h.id, h.api.clone()))
            .collect();
        let (stop, events) = (stop.clone(), events.clone());
        // Trusting the hosts' CA: the agents' APIs speak TLS.
        let agent = lab.state().http();
        std::thread::spawn(move || failover_poller(agent, apis, clock, stop, events))
    };
    // Stops the threads on every way out, errors included.
    struct Stop(Arc<AtomicBool>);
    impl Drop for Stop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let stopper = Stop(stop);

    let result = (|| {
        let mut injections = Vec::new();
        let mut transfers: Vec<Vec<Transfer>> = Vec::new();
        for &fault in &o.faults {
            for rep in 0..o.repeat {
                let from = clock.now();
                let mut ds = (0..o.downloads)
                    .map(|i| start_download(lab, o, &work.join(format!("d{i}"))))
                    .collect::<Result<Vec<_>, _>>()?;
                let until = Instant::now() + Duration::from_secs(10);
                while ds.iter().any(|d| d.established.is_none()) && Instant::now() < until {
                    mark_established(&mut ds, &clock);
                    std::thread::sleep(Duration::from_millis(20));
                }
                std::thread::sleep(o.lead);
                mark_established(&mut ds, &clock);
                let at = clock.now();
                let (target, back) = inject(lab, fault, rep, o)?;
                let back_at = wait_for(lab, back.as_ref(), o.recover_within, &clock);
                let by = Instant::now() + Duration::from_secs(60);
                let ts: Vec<Transfer> = ds
                    .into_iter()
                    .map(|d| finish_download(d, by, &clock, &blob))
                    .collect();
                if let Target::StoreNode(port) = target {
                    // The cluster gets its replica back before the next
                    // kill (else that kill could take slots with it).
                    lab.restart_store_node(port, o.recover_within)?;
                }
                lab.wait_in_sync(o.recover_within)?;
                std::thread::sleep(Duration::from_millis(500));
                injections.push(Injection {
                    fault,
                    target,
                    from,
                    to: clock.now(),
                    at,
                    back_at,
                });
                transfers.push(ts);
            }
        }
        let soak = if o.soak_s > 0 {
            let from = clock.now();
            let end = Instant::now() + Duration::from_secs(o.soak_s);
            let mut ds: Vec<Download> = Vec::new();
            let mut done = Vec::new();
            let mut k = 0usize;
            while Instant::now() < end {
                while ds.len() < o.downloads {
                    ds.push(start_download(lab, o, &work.join(format!("s{k}")))?);
                    k += 1;
                }
                mark_established(&mut ds, &clock);
                let mut running = Vec::new();
                for mut d in ds {
                    // The child keeps its exit status: finish_download
                    // sees it again.
                    match d.child.try_wait() {
                        Ok(None) => running.push(d),
                        _ => done.push(finish_download(d, Instant::now(), &clock, &blob)),
                    }
                }
                ds = running;
                std::thread::sleep(Duration::from_millis(50));
            }
            let by = Instant::now() + Duration::from_secs(60);
            for d in ds {
                done.push(finish_download(d, by, &clock, &blob));
            }
            let to = clock.now();
            Some((from, to, done, detector_counters(lab), silences(lab, clock)))
        } else {
            None
        };
        Ok::<_, LabError>((injections, transfers, soak))
    })();
    drop(stopper);
    let probes = prober
        .join()
        .map_err(|_| other("the prober thread panicked"))?;
    let _ = poller.join();
    let (injections, transfers, soak) = result?;
    let failovers: Vec<Failover> = events
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .cloned()
        .collect();
    let interval = o.probe_interval.as_secs_f64();
    let faults: Vec<FaultResult> = injections
        .iter()
        .zip(&transfers)
        .map(|(inj, ts)| measure(inj, &probes, ts, &failovers, interval))
        .collect();
    let _ = fs::remove_dir_all(&work);
    Ok(ChaosReport {
        options: o.clone(),
        store: lab.state().store_kind,
        summary: summarize(&faults),
        faults,
        soak: soak.map(|(from, to, ts, detector, silent)| {
            let r = measure_soak(from, to, &probes, &ts, &failovers);
            SoakResult {
                detector,
                silences_ms: r
                    .failover_events
                    .iter()
                    .map(|f| {
                        silent
                            .get(&(f.at_us, f.host, f.instance.clone()))
                            .map(|us| *us as f64 / 1000.0)
                    })
                    .collect(),
                ..r
            }
        }),
        controllers: lab.state().replicas.len().max(1),
    })
}

fn fmt_s(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}"))
}

/// Prints a report as text.
pub fn print(r: &ChaosReport) {
    let o = &r.options;
    println!(
        "{} paced downloads of 1 MiB at {} KiB/s per fault, a new connection every {} ms \
         (failed: no page within {} ms), Figure 4 east-to-a ({} -> {}); store: {:?}; \
         controllers: {}",
        o.downloads,
        o.rate_kib,
        o.probe_interval.as_millis(),
        o.probe_timeout.as_millis(),
        o.client,
        o.vip,
        r.store,
        r.controllers,
    );
    println!(
        "fault          runs  est.lost  window max/med s  goal s  recovery max/med s  false f/o  goals"
    );
    for s in &r.summary {
        println!(
            "{:<14} {:>4}  {:>3}/{:<4}  {:>6.2} / {:<6.2}  {:>6.1}  {:>7} / {:<7}  {:>9}  {}",
            s.fault.name(),
            s.runs,
            s.established_lost,
            s.established,
            s.window_max_s,
            s.window_median_s,
            s.goal_window_s,
            fmt_s(s.recovery_max_s),
            fmt_s(s.recovery_median_s),
            s.false_failovers,
            match (s.lost_goal_met, s.window_goal_met) {
                (true, true) => "met".to_string(),
                (l, w) => format!(
                    "NOT met ({})",
                    [(!l).then_some("connections lost"), (!w).then_some("window")]
                        .into_iter()
                        .flatten()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        );
    }
    println!("per fault:");
    for f in &r.faults {
        println!(
            "  {:<14} {:<32} lost {}/{}  probes failed {:>3}/{:<4} window {:.2} s  recovery {} s  failovers {} ({} false)",
            f.fault.name(),
            f.target,
            f.established_lost,
            f.established,
            f.probes_failed,
            f.probes,
            f.window_s,
            fmt_s(f.recovery_s),
            f.failovers,
            f.false_failovers
        );
        for l in &f.lost {
            println!("      lost: {l}");
        }
    }
    if let Some(s) = &r.soak {
        println!(
            "soak {:.0} s without faults: {} downloads, {} not whole; probes failed {}/{}; \
             false failovers {} (goal 0: {})",
            s.seconds,
            s.downloads,
            s.downloads_lost,
            s.probes_failed,
            s.probes,
            s.false_failovers,
            if s.false_failovers == 0 {
                "met"
            } else {
                "NOT met"
            }
        );
        if !s.detector.is_empty() {
            println!(
                "      detector: {}",
                s.detector
                    .iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        for (e, silent) in s.failover_events.iter().zip(&s.silences_ms) {
            println!(
                "      failover at {:.3} s: {} on host {} ({}{})",
                e.at_us as f64 / 1e6,
                e.instance,
                e.host,
                e.reason,
                silent.map_or(String::new(), |ms| format!("; silent {ms:.0} ms"))
            );
        }
    }
    println!(
        "goals: {}",
        if r.goals_met() {
            "all measured goals met"
        } else {
            "some NOT met (above)"
        }
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Probes every 0.1 s from `from` to `to`, failing where `fails` says.
    fn probes(from: f64, to: f64, fails: impl Fn(f64) -> bool) -> Vec<Probe> {
        let mut out = Vec::new();
        let mut t = from;
        while t < to - 1e-9 {
            let ok = !fails(t);
            out.push(Probe {
                start: t,
                end: t + if ok { 0.01 } else { 1.0 },
                ok,
            });
            t += 0.1;
        }
        out
    }

    fn inj(fault: Fault, target: Target, at: f64, back_at: Option<f64>) -> Injection {
        Injection {
            fault,
            target,
            from: 0.0,
            to: 10.0,
            at,
            back_at,
        }
    }

    fn transfer(established: Option<f64>, whole: bool) -> Transfer {
        Transfer {
            established,
            end: 6.0,
            whole,
            detail: if whole { String::new() } else { "cut".into() },
        }
    }

    fn failover(at: f64, host: u32, instance: &str) -> Failover {
        Failover {
            at_us: (at * 1e6) as i64,
            host,
            instance: instance.into(),
            reason: "heartbeat".into(),
        }
    }

    #[test]
    fn a_fault_nobody_noticed_has_no_window_and_recovers_when_the_component_is_back() {
        let ps = probes(0.0, 10.0, |_| false);
        let r = measure(
            &inj(Fault::Controller, Target::Controller, 2.0, Some(3.5)),
            &ps,
            &[transfer(Some(1.0), true), transfer(Some(1.2), true)],
            &[],
            0.1,
        );
        assert_eq!(r.probes, 100);
        assert_eq!(r.probes_failed, 0);
        assert_eq!(r.window_s, 0.0);
        assert!((r.recovery_s.unwrap() - 1.5).abs() < 1e-9, "{r:?}");
        assert_eq!((r.established, r.established_lost), (2, 0));
    }

    #[test]
    fn the_window_spans_the_failed_probes_and_recovery_waits_for_a_working_connection() {
        // Probes started in [2.0, 2.5) fail: five of them.
        let ps = probes(0.0, 10.0, |t| (2.0 - 1e-9..2.5 - 1e-9).contains(&t));
        let r = measure(
            &inj(
                Fault::Instance,
                Target::Instance {
                    name: "acme/fw/0".into(),
                    host: 2,
                },
                2.0,
                Some(2.1),
            ),
            &ps,
            &[],
            &[],
            0.1,
        );
        assert_eq!(r.probes_failed, 5);
        assert!((r.window_s - 0.5).abs() < 1e-9, "{r:?}");
        // The component was back at 2.1, but the first good probe after the
        // last failed one (2.4) started at 2.5 and ended at 2.51.
        assert!((r.recovery_s.unwrap() - 0.51).abs() < 1e-9, "{r:?}");
    }

    #[test]
    fn a_single_failed_probe_is_one_interval_and_scattered_ones_span_between() {
        let one = probes(0.0, 10.0, |t| (t - 3.0).abs() < 1e-6);
        let r = measure(
            &inj(Fault::Controller, Target::Controller, 2.0, Some(2.2)),
            &one,
            &[],
            &[],
            0.1,
        );
        assert!((r.window_s - 0.1).abs() < 1e-9);
        let two = probes(0.0, 10.0, |t| {
            (t - 3.0).abs() < 1e-6 || (t - 4.0).abs() < 1e-6
        });
        let r = measure(
            &inj(Fault::Controller, Target::Controller, 2.0, Some(2.2)),
            &two,
            &[],
            &[],
            0.1,
        );
        assert_eq!(r.probes_failed, 2);
        assert!((r.window_s - 1.1).abs() < 1e-9, "{r:?}");
    }

    #[test]
    fn no_recovery_when_the_component_never_came_back_or_connections_never_worked_again() {
        let ps = probes(0.0, 10.0, |_| false);
        let r = measure(
            &inj(Fault::Agent, Target::Host(1), 2.0, None),
            &ps,
            &[],
            &[],
            0.1,
        );
        assert_eq!(r.recovery_s, None);
        let dead = probes(0.0, 10.0, |t| t >= 2.0);
        let r = measure(
            &inj(Fault::Agent, Target::Host(1), 2.0, Some(2.5)),
            &dead,
            &[],
            &[],
            0.1,
        );
        assert_eq!(r.recovery_s, None);
        assert!(r.window_s > 7.9, "{r:?}");
    }

    #[test]
    fn only_downloads_established_before_the_fault_count_and_only_broken_ones_are_lost() {
        let r = measure(
            &inj(Fault::StorePrimary, Target::StoreNode(7000), 2.0, Some(4.0)),
            &probes(0.0, 10.0, |_| false),
            &[
                transfer(Some(1.0), true),
                transfer(Some(1.5), false),
                // Established after the fault, or never: not counted.
                transfer(Some(2.5), false),
                transfer(None, false),
            ],
            &[],
            0.1,
        );
        assert_eq!((r.established, r.established_lost), (2, 1));
        assert_eq!(r.lost, ["cut"]);
    }

    #[test]
    fn failovers_are_false_unless_the_fault_explains_them() {
        let fos = [
            failover(2.01, 2, "acme/fw/0"),
            failover(2.02, 3, "acme/ips/0"),
            // Outside the repetition's span: another repetition's.
            failover(11.0, 2, "acme/lb-a/0"),
            failover(-1.0, 2, "acme/lb-a/0"),
        ];
        let ps = probes(0.0, 10.0, |_| false);
        let kill = Target::Instance {
            name: "acme/fw/0".into(),
            host: 2,
        };
        let r = measure(
            &inj(Fault::Instance, kill, 2.0, Some(2.1)),
            &ps,
            &[],
            &fos,
            0.1,
        );
        assert_eq!((r.failovers, r.false_failovers), (2, 1));
        let r = measure(
            &inj(Fault::Agent, Target::Host(3), 2.0, Some(2.1)),
            &ps,
            &[],
            &fos,
            0.1,
        );
        assert_eq!((r.failovers, r.false_failovers), (2, 1));
        let r = measure(
            &inj(Fault::Controller, Target::Controller, 2.0, Some(2.1)),
            &ps,
            &[],
            &fos,
            0.1,
        );
        assert_eq!((r.failovers, r.false_failovers), (2, 2));
    }

    fn result(fault: Fault, window: f64, recovery: Option<f64>, lost: usize) -> FaultResult {
        FaultResult {
            fault,
            target: String::new(),
            established: 8,
            established_lost: lost,
            lost: vec![String::new(); lost],
            probes: 100,
            probes_failed: 0,
            window_s: window,
            recovery_s: recovery,
            failovers: 1,
            false_failovers: 0,
        }
    }

    #[test]
    fn the_summary_takes_max_and_median_per_kind_and_judges_each_goal() {
        let rs = [
            result(Fault::Instance, 0.1, Some(0.2), 0),
            result(Fault::Controller, 0.0, Some(3.0), 0),
            result(Fault::Instance, 0.3, Some(0.4), 0),
            result(Fault::Instance, 1.2, Some(1.5), 1),
            result(Fault::Controller, 0.1, None, 0),
        ];
        let s = summarize(&rs);
        assert_eq!(s.len(), 2);
        let i = &s[0];
        assert_eq!(i.fault, Fault::Instance);
        assert_eq!(
            (i.runs, i.established, i.established_lost, i.runs_losing),
            (3, 24, 1, 1)
        );
        assert!((i.window_max_s - 1.2).abs() < 1e-9 && (i.window_median_s - 0.3).abs() < 1e-9);
        assert_eq!(i.recovery_max_s, Some(1.5));
        assert_eq!(i.recovery_median_s, Some(0.4));
        assert!(!i.lost_goal_met && !i.window_goal_met);
        let c = &s[1];
        assert_eq!(c.fault, Fault::Controller);
        // One repetition did not recover: no maximum to report.
        assert_eq!(c.recovery_max_s, None);
        assert_eq!(c.recovery_median_s, Some(3.0));
        assert!((c.window_median_s - 0.05).abs() < 1e-9);
        // The controller's goal is no failed connection at all.
        assert!(c.lost_goal_met && !c.window_goal_met);
        let ok = summarize(&[result(Fault::StorePrimary, 3.0, Some(3.2), 0)]);
        assert!(ok[0].lost_goal_met && ok[0].window_goal_met);
    }

    #[test]
    fn the_soak_counts_every_failover_in_its_span_as_false() {
        let ps = probes(100.0, 110.0, |t| (t - 105.0).abs() < 1e-6);
        let fos = [failover(50.0, 1, "a"), failover(104.0, 2, "b")];
        let s = measure_soak(
            100.0,
            110.0,
            &ps,
            &[transfer(Some(100.5), true), transfer(Some(101.0), false)],
            &fos,
        );
        assert_eq!((s.probes, s.probes_failed), (100, 1));
        assert_eq!((s.downloads, s.downloads_lost), (2, 1));
        assert_eq!(s.false_failovers, 1);
        assert_eq!(s.failover_events[0].instance, "b");
    }

    #[test]
    fn fault_lists_parse_by_name_and_refuse_others_clearly() {
        assert_eq!(
            Fault::parse_list("instance, agent-stop,instance").unwrap(),
            [Fault::Instance, Fault::AgentStop]
        );
        assert!(Fault::parse_list("none").unwrap().is_empty());
        assert_eq!(
            Fault::parse_list("instance,agent,agent-stop,controller,store-primary,etcd-member")
                .unwrap(),
            Fault::ALL
        );
        let e = Fault::parse_list("instance,router")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`router`") && e.contains("store-primary"), "{e}");
        assert_eq!(
            Fault::parse_list("etcd-member").unwrap(),
            [Fault::EtcdMember]
        );
    }
}
