//! `sluice bench fleet`: the real controller (in process) against N simulated
//! agents (in the same process), to see how registration, applies and pushes
//! grow with the fleet (issue 25).
//!
//! Each simulated agent registers as the real one does (`POST /v1/hosts` with
//! its API URL and token), heartbeats with the version it runs and the health
//! of its instances at the interval the controller's last answer told it (at
//! once, no sooner than 50 ms after the last, when it accepted a new
//! configuration: the real agent's rule), and accepts the controller's pushes (`PUT /v1/config`,
//! bearer token checked) after checking them as the real agent would before
//! installing ([`sluice_agent::Dataplane::new`]): a configuration it refuses is
//! answered 400, as the real agent answers. Deltas (`PATCH /v1/config`) are
//! applied to the configuration it runs with the real agent's
//! [`AgentConfig::apply_delta`] (409 when based on another version, 400 when
//! they cannot be applied) and the result checked and installed as a whole
//! one is. One HTTP server serves every
//! simulated agent, each under its own path prefix (`/h/ID`): the controller
//! appends `/v1/config` to the API URL a host registered.

use std::collections::BTreeMap;
use std::io::Read;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;
use sluice_controller::client::Client;
use sluice_controller::{serve, ServerOptions};
use sluice_proto::{
    AgentConfig, ConfigDelta, DeltaError, HostHeartbeat, HostRegistration, InstanceHealth,
    VmRegistration,
};

/// Largest configuration a simulated agent accepts (the real agent's limit).
const MAX_BODY: u64 = 64 << 20;
/// Threads of the simulated agents' shared API server.
const API_THREADS: usize = 4;
/// Threads sending the simulated agents' heartbeats.
const HEARTBEAT_THREADS: usize = 4;
/// How often a heartbeat thread looks for agents due to heartbeat (a
/// heartbeat is at most this late).
const HEARTBEAT_SCAN: Duration = Duration::from_millis(20);
/// Longest window over which the controller's heartbeat rate is measured
/// (two heartbeat intervals, at least [`Options::rate_window`]).
const RATE_WINDOW_MAX: Duration = Duration::from_secs(30);

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Simulated hosts.
    pub hosts: u32,
    /// Tenants applied, one after the other.
    pub tenants: u32,
    /// A fixed interval each agent heartbeats at, whatever the controller
    /// tells (agents from before issue 25: 50 ms, and no early heartbeats);
    /// `None`: as the real agent, by the interval the controller told.
    pub heartbeat: Option<Duration>,
    /// Seal the fabric (`--fabric-auth`): every host's configuration carries
    /// keys for each of its peers.
    pub fabric_auth: bool,
    /// Longest wait for every agent to run its latest version at the end.
    pub sync_timeout: Duration,
    /// Shortest window over which the controller's heartbeat rate is measured
    /// at the end (two heartbeat intervals if longer).
    pub rate_window: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            hosts: 100,
            tenants: 200,
            heartbeat: None,
            fabric_auth: false,
            sync_timeout: Duration::from_secs(60),
            rate_window: Duration::from_secs(5),
        }
    }
}

/// What one simulated agent holds.
#[derive(Debug, Default)]
struct SimHost {
    /// The configuration it runs (the last one it accepted).
    config: Option<AgentConfig>,
    /// Pushes it accepted, and their bytes (whole configurations and
    /// deltas).
    pushes: u64,
    bytes: u64,
    /// Of those, the deltas.
    delta_pushes: u64,
    delta_bytes: u64,
    /// What the pushes would have been as whole configurations (the
    /// baseline, measured in the same run): bytes of the JSON of each
    /// configuration installed.
    whole_bytes: u64,
    /// Deltas answered 409 (based on another version than it ran).
    stale_deltas: u64,
    /// Pushes it refused (and why, the last one).
    refused: u64,
    last_refusal: Option<String>,
    /// The heartbeat interval the controller told it last (zero: none yet).
    every: Duration,
    /// When it heartbeats next (`None`: now) and last did.
    due: Option<Instant>,
    last_beat: Option<Instant>,
}

impl SimHost {
    /// A heartbeat started at `at` was answered with `told` (`None`: it failed);
    /// `fixed`: the interval to keep instead of the told one.
    fn beaten(&mut self, at: Instant, told: Option<Option<u64>>, fixed: Option<Duration>) {
        if let Some(t) = told {
            self.every = sluice_proto::heartbeat_interval(t);
        }
        let every = fixed.unwrap_or(self.every.max(sluice_proto::HEARTBEAT_MIN));
        self.due = Some(at + every);
        self.last_beat = Some(at);
    }
}

/// Every simulated agent, by host id - 1.
struct Sims {
    hosts: Vec<Mutex<SimHost>>,
    tokens: Vec<String>,
    registered: AtomicUsize,
    heartbeats: AtomicU64,
    heartbeat_errors: AtomicU64,
    stop: AtomicBool,
    /// The agents beat at this fixed interval (see [`Options::heartbeat`]).
    fixed: Option<Duration>,
    /// Times the controller was restarted. The in-process controller's
    /// shutdown leaves its keep-alive connections open, reading requests
    /// nobody answers (tiny_http's connection threads outlive the server):
    /// a heartbeat on one waited for the client's 30 s timeout, where a real
    /// controller's exit closes them and the agent's client reconnects at
    /// once. So each heartbeat thread starts a new client (connection pool)
    /// when this moves, as a real agent's pool would find its connection
    /// closed.
    restarts: AtomicU64,
}

impl Sims {
    fn host(&self, id: u32) -> Option<&Mutex<SimHost>> {
        self.hosts.get((id as usize).checked_sub(1)?)
    }

    fn totals(&self) -> Totals {
        self.hosts.iter().fold(Totals::default(), |t, h| {
            let h = h.lock().unwrap_or_else(|p| p.into_inner());
            Totals {
                pushes: t.pushes + h.pushes,
                bytes: t.bytes + h.bytes,
                delta_pushes: t.delta_pushes + h.delta_pushes,
                delta_bytes: t.delta_bytes + h.delta_bytes,
                whole_bytes: t.whole_bytes + h.whole_bytes,
                stale_deltas: t.stale_deltas + h.stale_deltas,
            }
        })
    }

    fn version(&self, id: u32) -> u64 {
        self.host(id)
            .map(|h| lock(h).config.as_ref().map_or(0, |c| c.version))
            .unwrap_or(0)
    }
}

/// What every simulated agent accepted so far.
#[derive(Debug, Clone, Copy, Default)]
struct Totals {
    pushes: u64,
    bytes: u64,
    delta_pushes: u64,
    delta_bytes: u64,
    whole_bytes: u64,
    stale_deltas: u64,
}

impl Totals {
    /// What was accepted since `before`, per `n` (tenants or hosts):
    /// (whole pushes, whole bytes, delta pushes, delta bytes).
    fn split_per(&self, before: &Totals, n: f64) -> [f64; 4] {
        let full_p = (self.pushes - self.delta_pushes) - (before.pushes - before.delta_pushes);
        let full_b = (self.bytes - self.delta_bytes) - (before.bytes - before.delta_bytes);
        [
            full_p as f64 / n,
            full_b as f64 / n,
            (self.delta_pushes - before.delta_pushes) as f64 / n,
            (self.delta_bytes - before.delta_bytes) as f64 / n,
        ]
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One statistic over a series of latencies, milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    /// Samples.
    pub n: usize,
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Median of the last quarter of the samples (the cost at the final size).
    pub last_quarter_p50_ms: f64,
}

impl Latency {
    fn of(ms: &[f64]) -> Latency {
        if ms.is_empty() {
            return Latency::default();
        }
        let pct = |v: &[f64], q: f64| {
            let mut v = v.to_vec();
            v.sort_by(|a, b| a.total_cmp(b));
            v[((v.len() - 1) as f64 * q).round() as usize]
        };
        let tail = &ms[ms.len() - ms.len().div_ceil(4)..];
        Latency {
            n: ms.len(),
            p50_ms: pct(ms, 0.5),
            p99_ms: pct(ms, 0.99),
            last_quarter_p50_ms: pct(tail, 0.5),
        }
    }
}

/// What the run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Hosts simulated.
    pub hosts: u32,
    /// Tenants applied.
    pub tenants: u32,
    /// Hosts registered per second (first heartbeat of each, one after the other).
    pub registration_per_s: f64,
    /// Each registration's latency.
    pub registration: Latency,
    /// Each VM registration's latency.
    pub vm_registration: Latency,
    /// Each tenant apply's latency.
    pub apply: Latency,
    /// Hosts the controller gave a new version per apply (mean).
    pub hosts_changed_per_apply: f64,
    /// Pushes the agents accepted during the tenant phase (VMs and applies),
    /// per tenant.
    pub pushes_per_tenant: f64,
    /// Bytes of configuration the agents received during the tenant phase, per tenant.
    pub bytes_per_tenant: f64,
    /// Pushes and bytes the agents received during registration, per host.
    pub pushes_per_registration: f64,
    /// Bytes received during registration, per host.
    pub bytes_per_registration: f64,
    /// Of the tenant phase's pushes per tenant: whole configurations, and
    /// their bytes.
    pub full_pushes_per_tenant: f64,
    /// Bytes of whole configurations per tenant.
    pub full_bytes_per_tenant: f64,
    /// Deltas per tenant.
    pub delta_pushes_per_tenant: f64,
    /// Bytes of deltas per tenant.
    pub delta_bytes_per_tenant: f64,
    /// Deltas the agents answered 409 over the run (each followed by the
    /// whole configuration).
    pub stale_deltas: u64,
    /// The baseline: bytes per tenant had every push been the whole
    /// configuration (the JSON of each configuration the agents installed).
    pub whole_bytes_per_tenant: f64,
    /// Hosts whose agent, once every agent was in sync, ran another
    /// configuration than the controller holds for it (none, unless pushes
    /// or deltas lose something).
    pub differing: Vec<u32>,
    /// Largest configuration an agent holds at the end, bytes of JSON.
    pub largest_config_bytes: usize,
    /// Peers in the largest configuration.
    pub largest_config_peers: usize,
    /// Time from the last apply until every agent ran its latest version (None:
    /// not within the timeout).
    pub sync_ms: Option<f64>,
    /// Agents not running their latest version at the end.
    pub unsynced: Vec<u32>,
    /// Pushes the agents refused (400) over the run.
    pub refused: u64,
    /// The last refusal's reason, if any.
    pub last_refusal: Option<String>,
    /// Heartbeats sent per second over the run (all agents).
    pub heartbeats_per_s: f64,
    /// Heartbeats the controller received per second (its
    /// `sluice_controller_heartbeats_total`) over a window once every agent
    /// was in sync, and that window, seconds.
    pub controller_heartbeats_per_s: f64,
    /// The window of [`Report::controller_heartbeats_per_s`], seconds.
    pub heartbeat_window_s: f64,
    /// The heartbeat interval the controller tells its agents at the end, ms
    /// (`sluice_controller_heartbeat_interval_seconds`).
    pub heartbeat_interval_ms: f64,
    /// A fixed heartbeat interval the agents kept instead, ms.
    pub fixed_heartbeat_ms: Option<u64>,
    /// Heartbeats that failed.
    pub heartbeat_errors: u64,
    /// The process's resident memory grew by this much from before the
    /// controller started to the end (controller and simulated agents), MiB.
    pub rss_growth_mib: f64,
    /// Size of the controller's database at the end, MiB.
    pub db_mib: f64,
    /// The process's peak resident memory (controller and simulated agents
    /// together), MiB.
    pub peak_rss_mib: f64,
    /// CPU seconds the process spent over the run (controller, simulated
    /// agents and the bench's own client together, as for memory).
    pub cpu_s: f64,
    /// A restarted controller (same database and address) took this long to
    /// start, ms (None: not restarted).
    pub restart_ms: Option<f64>,
    /// From the restart until every agent had heartbeated to the restarted
    /// controller, ms (None: not within the timeout, or not restarted).
    pub restart_heard_ms: Option<f64>,
    /// From the restart until every agent had heartbeated to the restarted
    /// controller and ran the version it wants, ms (None: not within the
    /// timeout, or not restarted).
    pub restart_sync_ms: Option<f64>,
    /// Whole run, seconds.
    pub seconds: f64,
}

/// What the run left behind, for tests to check against the controller's view.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The measurements.
    pub report: Report,
    /// Per host, the configuration its agent runs at the end.
    pub received: BTreeMap<u32, AgentConfig>,
    /// Per host, the version the controller wants it to run at the end.
    pub desired: BTreeMap<u32, u64>,
    /// Per tenant, the hosts of its VMs.
    pub vm_hosts: BTreeMap<String, Vec<u32>>,
}

/// The spec of tenant `i`: a service of 1-4 VMs, a firewall and a service of
/// one VM, in one chain; and where its VMs go (2-5 hosts spread over the fleet).
pub fn tenant(i: u32, hosts: u32) -> (String, Vec<(String, u32)>) {
    let webs = 1 + i % 4;
    let mut vms = Vec::new();
    let mut web = Vec::new();
    for j in 0..=webs {
        let host = ((i as u64 * 7919 + j as u64 * 104_729) % hosts as u64) as u32 + 1;
        let name = if j == webs {
            "d1".to_string()
        } else {
            format!("w{}", j + 1)
        };
        if j < webs {
            web.push(format!("{name}: 10.0.1.{}", j + 1));
        }
        vms.push((name, host));
    }
    let spec = format!(
        "tenant: t{i}
elements:
  web: {{ type: service, vms: {{ {} }} }}
  db: {{ type: service, vms: {{ d1: 10.0.2.1 }} }}
  fw:
    type: middlebox
    function: firewall
    config: {{ rules: \"allow tcp from any to 10.0.2.1 port 5432\\ndefault deny\" }}
chains:
  - {{ name: app, path: [web, fw, db] }}
",
        web.join(", ")
    );
    (spec, vms)
}

fn registration(id: u32, base: &str, sims: &Sims) -> HostHeartbeat {
    let config = sims.host(id).map(|h| {
        let h = lock(h);
        (
            h.config.as_ref().map_or(0, |c| c.version),
            h.config
                .as_ref()
                .map(|c| {
                    c.instances
                        .iter()
                        .map(|i| InstanceHealth {
                            name: i.name.clone(),
                            port: i.port,
                            alive: true,
                            suspected: false,
                            last_heartbeat_age_ms: Some(10),
                            ..InstanceHealth::default()
                        })
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default(),
        )
    });
    let (version, instances) = config.unwrap_or_default();
    HostHeartbeat {
        registration: HostRegistration {
            host: id,
            name: format!("sim{id}"),
            underlay: Ipv4Addr::from(0x0a00_0000 | id),
            api: format!("{base}/h/{id}"),
            config_version: version,
            api_token: Some(sims.tokens[id as usize - 1].clone()),
            capacity: None,
            api_csr: None,
        },
        instances,
        chains: Vec::new(),
        accusations: Vec::new(),
        backend_checks: Vec::new(),
        peers: Vec::new(),
    }
}

/// Answers one request to a simulated agent, as the real agent's API does.
fn handle(sims: &Sims, mut req: tiny_http::Request) {
    let url = req.url().to_string();
    let parsed = url
        .strip_prefix("/h/")
        .and_then(|r| r.split_once('/'))
        .and_then(|(id, rest)| Some((id.parse::<u32>().ok()?, rest.to_string())));
    let reply = |req: tiny_http::Request, code: u16, body: String| {
        let _ = req.respond(tiny_http::Response::from_string(body).with_status_code(code));
    };
    let Some((id, rest)) = parsed else {
        return reply(
            req,
            404,
            format!("{{\"error\":\"no such resource: {url}\"}}"),
        );
    };
    let Some(host) = sims.host(id) else {
        return reply(req, 404, format!("{{\"error\":\"no host {id}\"}}"));
    };
    let delta = match req.method() {
        tiny_http::Method::Put => false,
        tiny_http::Method::Patch => true,
        _ => {
            return reply(
                req,
                404,
                format!("{{\"error\":\"no such resource: /{rest}\"}}"),
            )
        }
    };
    if rest != "v1/config" {
        return reply(
            req,
            404,
            format!("{{\"error\":\"no such resource: /{rest}\"}}"),
        );
    }
    let want = format!("Bearer {}", sims.tokens[id as usize - 1]);
    let authorized = req
        .headers()
        .iter()
        .any(|h| h.field.equiv("Authorization") && h.value.as_str() == want);
    if !authorized {
        return reply(
            req,
            401,
            "{\"error\":\"/v1/config needs this agent's token\"}".into(),
        );
    }
    let mut body = Vec::new();
    if let Err(e) = req.as_reader().take(MAX_BODY).read_to_end(&mut body) {
        return reply(req, 400, format!("{{\"error\":\"reading the body: {e}\"}}"));
    }
    // Checked and installed under the host's lock, as the real agent holds
    // its configuration's lock: a delta applies to what runs.
    let mut h = lock(host);
    let checked = if delta {
        match serde_json::from_slice::<ConfigDelta>(&body) {
            Err(e) => Err(format!("bad configuration delta JSON: {e}")),
            Ok(d) => {
                let next = match h.config.as_ref() {
                    None => Err(DeltaError::Base {
                        running: 0,
                        base: d.base_version,
                    }),
                    Some(cur) => cur.apply_delta(&d),
                };
                match next {
                    Ok(cfg) => Ok(cfg),
                    // The controller sends the whole configuration next.
                    Err(e @ DeltaError::Base { .. }) => {
                        h.stale_deltas += 1;
                        drop(h);
                        let body = serde_json::json!({ "error": e.to_string() });
                        return reply(req, 409, body.to_string());
                    }
                    Err(e) => Err(e.to_string()),
                }
            }
        }
    } else {
        serde_json::from_slice::<AgentConfig>(&body)
            .map_err(|e| format!("bad configuration JSON: {e}"))
    };
    let checked = checked.and_then(|cfg| {
        sluice_agent::Dataplane::new(id, &cfg)
            .map(|_| cfg)
            .map_err(|e| e.to_string())
    });
    match checked {
        Ok(cfg) => {
            let v = cfg.version;
            h.pushes += 1;
            h.bytes += body.len() as u64;
            if delta {
                h.delta_pushes += 1;
                h.delta_bytes += body.len() as u64;
                h.whole_bytes += serde_json::to_vec(&cfg).map_or(0, |v| v.len() as u64);
            } else {
                h.whole_bytes += body.len() as u64;
            }
            h.config = Some(cfg);
            // News the controller waits for: heartbeat now, or 50 ms after
            // the last one (the real agent looks every 50 ms).
            if sims.fixed.is_none() {
                let now = Instant::now();
                let soon = h
                    .last_beat
                    .map_or(now, |t| (t + sluice_proto::HEARTBEAT_MIN).max(now));
                if h.due.is_none_or(|d| d > soon) {
                    h.due = Some(soon);
                }
            }
            drop(h);
            reply(req, 200, format!("{{\"version\":{v}}}"));
        }
        Err(e) => {
            h.refused += 1;
            h.last_refusal = Some(e.clone());
            drop(h);
            reply(req, 400, serde_json::json!({ "error": e }).to_string());
        }
    }
}

/// Heartbeats hosts `first, first + step, ...` (those registered) when each is
/// due, until told to stop.
fn heartbeats(sims: &Sims, client: &Client, base: &str, first: usize, step: usize) {
    // The real agent's heartbeat gives up after 500 ms (and beats again at
    // its interval): one sent to a controller that stops does not hold the
    // thread for the client's usual 30 s.
    let timeout = Duration::from_millis(500);
    let (mut client, mut restarts) = (client.clone().with_timeout(timeout), 0);
    while !sims.stop.load(Ordering::Acquire) {
        let r = sims.restarts.load(Ordering::Acquire);
        if r != restarts {
            client = client.reconnected();
            restarts = r;
        }
        let n = sims.registered.load(Ordering::Acquire);
        let mut i = first;
        while i < n && !sims.stop.load(Ordering::Acquire) {
            let id = i as u32 + 1;
            i += step;
            let now = Instant::now();
            let Some(host) = sims.host(id) else { continue };
            if lock(host).due.is_some_and(|d| d > now) {
                continue;
            }
            let hb = registration(id, base, sims);
            let told = match client.heartbeat(&hb) {
                Ok(ack) => {
                    sims.heartbeats.fetch_add(1, Ordering::Relaxed);
                    Some(ack.heartbeat_ms)
                }
                Err(_) => {
                    sims.heartbeat_errors.fetch_add(1, Ordering::Relaxed);
                    None
                }
            };
            lock(host).beaten(now, told, sims.fixed);
        }
        std::thread::sleep(HEARTBEAT_SCAN);
    }
}

/// The value of the unlabelled sample `name` in the controller's `/metrics`.
fn metric(url: &str, token: &str, name: &str) -> Result<f64, String> {
    let text = ureq::get(&format!("{url}/metrics"))
        .set("Authorization", &format!("Bearer {token}"))
        .call()
        .map_err(|e| format!("/metrics: {e}"))?
        .into_string()
        .map_err(|e| format!("/metrics: {e}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .ok_or_else(|| format!("/metrics has no {name}"))
}

fn rss_kib() -> u64 {
    status_kib("VmRSS:")
}

/// A `/proc/self/status` line's kB (0 if not there).
fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Runs the fleet: registers every host, then per tenant registers its VMs and
/// applies it, then waits for every agent to run its latest version.
/// `progress` hears what is under way.
pub fn run(opts: &Options, progress: &mut dyn FnMut(&str)) -> Result<Outcome, String> {
    let started = Instant::now();
    let hosts = opts.hosts.max(1);
    let dir = tempfile::tempdir().map_err(|e| format!("temporary directory: {e}"))?;
    let rss_before = rss_kib();
    let cpu_before = crate::process_cpu_s("self");
    let token_file = dir.path().join("admin.token");
    let server_options = |listen: std::net::SocketAddr| ServerOptions {
        listen,
        db: dir.path().join("controller.db"),
        state_url: "local".into(),
        admin_token_file: Some(token_file.clone()),
        fabric_auth: opts.fabric_auth,
        tls: None,
        placement: Default::default(),
        distribution: Default::default(),
        containment_threshold: sluice_controller::reconcile::DEFAULT_THRESHOLD,
        require_agent_tls: false,
        etcd: None,
    };
    let server = serve(server_options(
        "127.0.0.1:0".parse().map_err(|e| format!("{e}"))?,
    ))
    .map_err(|e| format!("controller: {e}"))?;
    let admin = std::fs::read_to_string(&token_file)
        .map_err(|e| format!("admin token: {e}"))?
        .trim()
        .to_string();
    let client = Client::new(&server.url()).with_token(Some(&admin));

    let api =
        Arc::new(tiny_http::Server::http("127.0.0.1:0").map_err(|e| format!("agents' API: {e}"))?);
    let base = match api.server_addr().to_ip() {
        Some(a) => format!("http://{a}"),
        None => return Err("agents' API: not an IP listener".into()),
    };
    let sims = Arc::new(Sims {
        hosts: (0..hosts).map(|_| Mutex::new(SimHost::default())).collect(),
        tokens: (1..=hosts)
            .map(|h| format!("sim-agent-{h}-{:x}", started.elapsed().as_nanos()))
            .collect(),
        registered: AtomicUsize::new(0),
        heartbeats: AtomicU64::new(0),
        heartbeat_errors: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        fixed: opts.heartbeat,
        restarts: AtomicU64::new(0),
    });
    let mut threads: Vec<JoinHandle<()>> = Vec::new();
    for _ in 0..API_THREADS {
        let (api, sims) = (api.clone(), sims.clone());
        threads.push(std::thread::spawn(move || {
            while let Ok(req) = api.recv() {
                handle(&sims, req);
            }
        }));
    }
    let hb_started = Instant::now();
    for k in 0..HEARTBEAT_THREADS {
        let (sims, client, base) = (sims.clone(), client.clone(), base.clone());
        threads.push(std::thread::spawn(move || {
            heartbeats(&sims, &client, &base, k, HEARTBEAT_THREADS)
        }));
    }
    let metrics = (server.url(), admin.clone());
    let result = measure(opts, hosts, &sims, &client, &base, &metrics, progress);
    // A restarted controller (same database, same address): how long it
    // takes to start, and until every agent has heartbeated to it and runs
    // the version it wants.
    let addr: std::net::SocketAddr = server
        .url()
        .trim_start_matches("http://")
        .parse()
        .map_err(|e| format!("controller address: {e}"))?;
    let (server, restart) = match &result {
        Ok(_) => {
            progress("restarting the controller");
            server.shutdown();
            // New connections, for the agents and the bench's own polling
            // (see [`Sims::restarts`]).
            sims.restarts.fetch_add(1, Ordering::Release);
            let client = client.reconnected();
            let t = Instant::now();
            let server =
                serve(server_options(addr)).map_err(|e| format!("restarted controller: {e}"))?;
            let started_ms = ms_since(t);
            let (mut heard, mut synced) = (None, None);
            while t.elapsed() < opts.sync_timeout {
                let listed = client.hosts().unwrap_or_default();
                let all = listed.len() == hosts as usize;
                if heard.is_none() && all && listed.iter().all(|h| h.reported_version.is_some()) {
                    heard = Some(ms_since(t));
                }
                if all
                    && listed.iter().all(|h| {
                        h.reported_version.is_some() && sims.version(h.id) == h.desired_version
                    })
                {
                    synced = Some(ms_since(t));
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            (server, Some((started_ms, heard, synced)))
        }
        Err(_) => (server, None),
    };
    sims.stop.store(true, Ordering::Release);
    let hb_s = hb_started.elapsed().as_secs_f64();
    // Heartbeat threads first (they call the controller), then the controller
    // (its pushes call the agents), then the agents' server.
    let (hb_threads, api_threads): (Vec<_>, Vec<_>) = threads
        .into_iter()
        .enumerate()
        .partition(|(i, _)| *i >= API_THREADS);
    for (_, t) in hb_threads {
        let _ = t.join();
    }
    let rss_after = rss_kib();
    let peak_rss_kib = status_kib("VmHWM:");
    let db_mib = std::fs::metadata(dir.path().join("controller.db"))
        .map(|m| m.len() as f64 / (1 << 20) as f64)
        .unwrap_or(0.0);
    server.shutdown();
    for _ in 0..API_THREADS {
        api.unblock();
    }
    for (_, t) in api_threads {
        let _ = t.join();
    }
    let mut out = result?;
    out.report.restart_ms = restart.map(|r| r.0);
    out.report.restart_heard_ms = restart.and_then(|r| r.1);
    out.report.restart_sync_ms = restart.and_then(|r| r.2);
    out.report.peak_rss_mib = peak_rss_kib as f64 / 1024.0;
    out.report.heartbeats_per_s = sims.heartbeats.load(Ordering::Relaxed) as f64 / hb_s;
    out.report.heartbeat_errors = sims.heartbeat_errors.load(Ordering::Relaxed);
    out.report.rss_growth_mib = rss_after.saturating_sub(rss_before) as f64 / 1024.0;
    out.report.db_mib = db_mib;
    out.report.seconds = started.elapsed().as_secs_f64();
    out.report.cpu_s = crate::process_cpu_s("self") - cpu_before;
    Ok(out)
}

fn measure(
    opts: &Options,
    hosts: u32,
    sims: &Sims,
    client: &Client,
    base: &str,
    (url, token): &(String, String),
    progress: &mut dyn FnMut(&str),
) -> Result<Outcome, String> {
    progress(&format!("registering {hosts} hosts"));
    let mut reg_ms = Vec::new();
    let t = Instant::now();
    for id in 1..=hosts {
        let hb = registration(id, base, sims);
        let t = Instant::now();
        let ack = client
            .heartbeat(&hb)
            .map_err(|e| format!("registering host {id}: {e}"))?;
        reg_ms.push(ms_since(t));
        if let Some(h) = sims.host(id) {
            lock(h).beaten(t, Some(ack.heartbeat_ms), sims.fixed);
        }
        sims.registered.store(id as usize, Ordering::Release);
    }
    let reg_s = t.elapsed().as_secs_f64();
    let reg = sims.totals();
    let (reg_pushes, reg_bytes) = (reg.pushes, reg.bytes);

    progress(&format!("applying {} tenants", opts.tenants));
    let mut vm_ms = Vec::new();
    let mut apply_ms = Vec::new();
    let mut changed = 0usize;
    let mut vm_hosts = BTreeMap::new();
    for i in 0..opts.tenants {
        let (spec, vms) = tenant(i, hosts);
        for (k, (name, host)) in vms.iter().enumerate() {
            let t = Instant::now();
            client
                .register_vm(&VmRegistration {
                    tenant: format!("t{i}"),
                    name: name.clone(),
                    host: *host,
                    iface: format!("t{i}-{name}"),
                    mac: format!("02:00:00:00:{:02x}:{:02x}", (k >> 8) & 0xff, k & 0xff),
                    addr: if name == "d1" {
                        Ipv4Addr::new(10, 0, 2, 1)
                    } else {
                        Ipv4Addr::new(10, 0, 1, name[1..].parse().unwrap_or(1))
                    }
                    .into(),
                    gateway: false,
                })
                .map_err(|e| format!("tenant t{i}: VM {name}: {e}"))?;
            vm_ms.push(ms_since(t));
        }
        vm_hosts.insert(format!("t{i}"), vms.iter().map(|(_, h)| *h).collect());
        let t = Instant::now();
        let s = client
            .apply(None, &spec)
            .map_err(|e| format!("tenant t{i}: apply: {e}"))?;
        apply_ms.push(ms_since(t));
        changed += s.pushed.len();
        if (i + 1) % 50 == 0 {
            progress(&format!("{} tenants applied", i + 1));
        }
    }
    let applied = Instant::now();

    progress("waiting for every agent to run its latest version");
    let mut desired = BTreeMap::new();
    let mut sync_ms = None;
    while applied.elapsed() < opts.sync_timeout {
        desired = client
            .hosts()
            .map_err(|e| format!("listing hosts: {e}"))?
            .into_iter()
            .map(|h| (h.id, h.desired_version))
            .collect();
        if desired.iter().all(|(h, v)| sims.version(*h) == *v) {
            sync_ms = Some(ms_since(applied));
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let unsynced: Vec<u32> = desired
        .iter()
        .filter(|(h, v)| sims.version(**h) != **v)
        .map(|(h, _)| *h)
        .collect();

    // The heartbeats the controller receives in the steady state: over at
    // least two of the intervals it tells.
    let interval = metric(url, token, "sluice_controller_heartbeat_interval_seconds")?;
    let every = opts
        .heartbeat
        .unwrap_or(Duration::from_secs_f64(interval.max(0.0)));
    let window = (2 * every).clamp(opts.rate_window, RATE_WINDOW_MAX.max(opts.rate_window));
    progress(&format!(
        "counting the controller's heartbeats for {:.1} s (interval told: {:.0} ms)",
        window.as_secs_f64(),
        interval * 1e3
    ));
    let before = metric(url, token, "sluice_controller_heartbeats_total")?;
    let t = Instant::now();
    std::thread::sleep(window);
    let after = metric(url, token, "sluice_controller_heartbeats_total")?;
    let window_s = t.elapsed().as_secs_f64();
    let end = sims.totals();
    let (pushes, bytes) = (end.pushes, end.bytes);
    let mut received = BTreeMap::new();
    let (mut refused, mut last_refusal) = (0, None);
    for (i, h) in sims.hosts.iter().enumerate() {
        let h = lock(h);
        refused += h.refused;
        if h.last_refusal.is_some() {
            last_refusal.clone_from(&h.last_refusal);
        }
        if let Some(c) = &h.config {
            received.insert(i as u32 + 1, c.clone());
        }
    }
    // What each agent ended with is what the controller holds for its host
    // (secrets aside: the controller shows them redacted), whether it came
    // whole or as deltas.
    let mut differing = Vec::new();
    for (h, c) in &received {
        let want = client
            .config(*h)
            .map_err(|e| format!("host {h}'s configuration: {e}"))?;
        if want.redacted() != c.redacted() {
            differing.push(*h);
        }
    }
    let largest = received
        .values()
        .map(|c| (serde_json::to_vec(c).map_or(0, |v| v.len()), c.peers.len()))
        .max()
        .unwrap_or_default();
    let per_tenant = opts.tenants.max(1) as f64;
    let [full_pushes, full_bytes, delta_pushes, delta_bytes] = end.split_per(&reg, per_tenant);
    let report = Report {
        hosts,
        tenants: opts.tenants,
        registration_per_s: hosts as f64 / reg_s,
        registration: Latency::of(&reg_ms),
        vm_registration: Latency::of(&vm_ms),
        apply: Latency::of(&apply_ms),
        hosts_changed_per_apply: changed as f64 / per_tenant,
        pushes_per_tenant: (pushes - reg_pushes) as f64 / per_tenant,
        bytes_per_tenant: (bytes - reg_bytes) as f64 / per_tenant,
        pushes_per_registration: reg_pushes as f64 / hosts as f64,
        bytes_per_registration: reg_bytes as f64 / hosts as f64,
        full_pushes_per_tenant: full_pushes,
        full_bytes_per_tenant: full_bytes,
        delta_pushes_per_tenant: delta_pushes,
        delta_bytes_per_tenant: delta_bytes,
        stale_deltas: end.stale_deltas,
        whole_bytes_per_tenant: (end.whole_bytes - reg.whole_bytes) as f64 / per_tenant,
        differing,
        largest_config_bytes: largest.0,
        largest_config_peers: largest.1,
        sync_ms,
        unsynced,
        refused,
        last_refusal,
        heartbeats_per_s: 0.0,
        controller_heartbeats_per_s: (after - before) / window_s,
        heartbeat_window_s: window_s,
        heartbeat_interval_ms: interval * 1e3,
        fixed_heartbeat_ms: opts.heartbeat.map(|d| d.as_millis() as u64),
        heartbeat_errors: 0,
        rss_growth_mib: 0.0,
        db_mib: 0.0,
        peak_rss_mib: 0.0,
        cpu_s: 0.0,
        restart_ms: None,
        restart_heard_ms: None,
        restart_sync_ms: None,
        seconds: 0.0,
    };
    Ok(Outcome {
        report,
        received,
        desired,
        vm_hosts,
    })
}

/// The report as a table for people.
pub fn table(r: &Report) -> String {
    let mut s = format!(
        "fleet: {} hosts, {} tenants ({:.1} s)\n",
        r.hosts, r.tenants, r.seconds
    );
    let mut row = |k: &str, v: String| s.push_str(&format!("  {k:<42} {v}\n"));
    let lat = |l: &Latency| {
        format!(
            "p50 {:.2} ms  p99 {:.2} ms  last quarter p50 {:.2} ms  (n={})",
            l.p50_ms, l.p99_ms, l.last_quarter_p50_ms, l.n
        )
    };
    row(
        "host registration",
        format!("{:.0} hosts/s", r.registration_per_s),
    );
    row("  each", lat(&r.registration));
    row(
        "  pushes, bytes received per registration",
        format!(
            "{:.1}, {:.0}",
            r.pushes_per_registration, r.bytes_per_registration
        ),
    );
    row("VM registration", lat(&r.vm_registration));
    row("tenant apply", lat(&r.apply));
    row(
        "  hosts given a new version per apply",
        format!("{:.2}", r.hosts_changed_per_apply),
    );
    row(
        "  pushes, bytes received per tenant",
        format!("{:.1}, {:.0}", r.pushes_per_tenant, r.bytes_per_tenant),
    );
    let per = |bytes: f64, pushes: f64| {
        if pushes > 0.0 {
            format!("{:.0}", bytes / pushes)
        } else {
            "-".into()
        }
    };
    row(
        "    whole configurations: pushes, bytes",
        format!(
            "{:.2}, {:.0} ({} bytes each)",
            r.full_pushes_per_tenant,
            r.full_bytes_per_tenant,
            per(r.full_bytes_per_tenant, r.full_pushes_per_tenant)
        ),
    );
    row(
        "    deltas: pushes, bytes",
        format!(
            "{:.2}, {:.0} ({} bytes each; {} answered 409 over the run)",
            r.delta_pushes_per_tenant,
            r.delta_bytes_per_tenant,
            per(r.delta_bytes_per_tenant, r.delta_pushes_per_tenant),
            r.stale_deltas
        ),
    );
    row(
        "    if every push were whole (baseline)",
        format!(
            "{:.0} bytes per tenant: sent x{:.2} of it",
            r.whole_bytes_per_tenant,
            r.bytes_per_tenant / r.whole_bytes_per_tenant.max(1.0)
        ),
    );
    row(
        "agents running another configuration than the controller's",
        format!("{}", r.differing.len()),
    );
    row(
        "largest configuration",
        format!(
            "{} bytes, {} peers",
            r.largest_config_bytes, r.largest_config_peers
        ),
    );
    row(
        "every agent in sync after the last apply",
        match r.sync_ms {
            Some(ms) => format!("{ms:.0} ms"),
            None => format!("NOT within the timeout: {} hosts behind", r.unsynced.len()),
        },
    );
    row(
        "heartbeats sent over the run",
        format!(
            "{:.0}/s ({} failed)",
            r.heartbeats_per_s, r.heartbeat_errors
        ),
    );
    row(
        "heartbeats received by the controller",
        format!(
            "{:.0}/s over {:.1} s in sync; interval told {:.0} ms{}",
            r.controller_heartbeats_per_s,
            r.heartbeat_window_s,
            r.heartbeat_interval_ms,
            r.fixed_heartbeat_ms
                .map(|ms| format!(" (agents kept a fixed {ms} ms)"))
                .unwrap_or_default()
        ),
    );
    row(
        "pushes refused by agents",
        format!(
            "{}{}",
            r.refused,
            r.last_refusal
                .as_ref()
                .map(|e| format!(" (last: {e})"))
                .unwrap_or_default()
        ),
    );
    row("process RSS growth", format!("{:.1} MiB", r.rss_growth_mib));
    row("process peak RSS", format!("{:.1} MiB", r.peak_rss_mib));
    row(
        "process CPU (controller, agents, client)",
        format!(
            "{:.1} s, {:.2} cores over the run, {:.2} ms per tenant",
            r.cpu_s,
            r.cpu_s / r.seconds.max(1e-9),
            r.cpu_s * 1e3 / f64::from(r.tenants.max(1))
        ),
    );
    row(
        "restarted controller: started, all heard, in sync",
        match r.restart_ms {
            Some(s) => {
                let ms = |v: Option<f64>| {
                    v.map_or("NOT within the timeout".into(), |v| format!("{v:.0} ms"))
                };
                format!(
                    "{s:.0} ms, {}, {}",
                    ms(r.restart_heard_ms),
                    ms(r.restart_sync_ms)
                )
            }
            None => "not restarted".into(),
        },
    );
    row("controller database", format!("{:.1} MiB", r.db_mib));
    let hosts = r.hosts.max(1) as f64;
    s.push_str(&format!(
        "  ratios: apply p50 per host {:.4} ms; bytes per tenant per host {:.1}; pushes per tenant / VMs per tenant (~3.5) {:.2}\n",
        r.apply.p50_ms / hosts,
        r.bytes_per_tenant / hosts,
        r.pushes_per_tenant / 3.5
    ));
    s
}
