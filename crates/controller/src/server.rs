//! The REST API (tiny_http, a small pool of threads) and the pusher that sends
//! each host's configuration to its agent.
//!
//! Every mutating request works on a copy of the desired state: place, compile
//! every tenant, derive every host's configuration; only if all of that succeeds
//! is the copy persisted (one transaction) and swapped in, and the hosts whose
//! configuration changed get a new version and a push. API calls never wait for
//! agents: a background pusher sends configurations, retries failures with
//! backoff, and re-pushes when a heartbeat shows an agent running another version.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::Value;
use sluice_proto::{
    AgentConfig, AgentStatus, ChainMeasure, HostHeartbeat, PinnedFlows, VmRegistration,
};
use sluice_scaling::{Decision, Scaler};
use sluice_switch::{HostId, Output, PortId};
use sluice_tenant::TenantSpec;

use crate::api::*;
use crate::db::{Db, DbError};
use crate::lease::{Decision as LeaseDecision, LeaseGate};
use crate::place::{instance_name, versioned, Desired, Host, InstanceKey, PlaceError};

/// The OpenAPI document of this API.
pub const OPENAPI_YAML: &str = include_str!("../../../docs/openapi.yaml");

/// Every route the server implements: (method, path template).
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/healthz"),
    ("GET", "/v1/openapi.yaml"),
    ("GET", "/v1/tenants"),
    ("POST", "/v1/tenants"),
    ("GET", "/v1/tenants/{name}"),
    ("PUT", "/v1/tenants/{name}"),
    ("DELETE", "/v1/tenants/{name}"),
    ("GET", "/v1/hosts"),
    ("POST", "/v1/hosts"),
    ("GET", "/v1/hosts/{id}/fib"),
    ("GET", "/v1/hosts/{id}/config"),
    ("GET", "/v1/vms"),
    ("PUT", "/v1/vms/{tenant}/{name}"),
    ("DELETE", "/v1/vms/{tenant}/{name}"),
    ("GET", "/v1/instances"),
    ("GET", "/v1/chains"),
    ("GET", "/v1/tenants/{name}/middleboxes/{middlebox}"),
    ("PUT", "/v1/tenants/{name}/middleboxes/{middlebox}"),
    ("POST", "/v1/tenants/{name}/chains/{chain}/metrics"),
    ("GET", "/v1/tenants/{name}/chains/{chain}/scaling"),
    ("PUT", "/v1/tenants/{name}/chains/{chain}/scaling"),
    ("DELETE", "/v1/tenants/{name}/chains/{chain}/scaling"),
    ("POST", "/v1/tenants/{name}/chains/{chain}/scaling/request"),
    ("GET", "/v1/events"),
];

/// A host is alive if heard from within this long.
const ALIVE: Duration = Duration::from_secs(1);
/// A heartbeat with a stale version re-pushes at most this often.
const REPUSH_AFTER: Duration = Duration::from_secs(1);
/// A host not heard from for this long has all its instances suspected (its
/// agent may be gone); agents heartbeat every 50 ms.
pub const HOST_SILENT: Duration = Duration::from_millis(300);
/// A down instance rejoins once reported healthy for this long (one missed
/// agent heartbeat's worth), so a flapping instance does not churn every host.
pub const REJOIN_AFTER: Duration = Duration::from_millis(100);
/// How long an instance must stay suspected (alive but silent), report after
/// report, before the controller takes it out of every host's groups. The agent
/// of its host has already moved its flows locally within the suspicion timeout;
/// the controller's global rewrite follows only a lasting silence, so a loaded
/// instance that misses a heartbeat now and then does not make it push new
/// configurations to every host several times a second. A dead process is
/// acted on at once.
pub const SUSPECT_CONFIRM: Duration = Duration::from_millis(150);
/// How long a removed local-state instance drains unless the request says.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Events kept (`GET /v1/events`).
pub const EVENTS_KEPT: usize = 10_000;
/// How often the ticker checks host silence and drains.
const TICK: Duration = Duration::from_millis(20);
/// How often a host's status is polled for the pinned flows of a drain.
const DRAIN_POLL: Duration = Duration::from_millis(100);
/// Longest a new instance of a pinned middlebox gets most new flows: by then
/// the flows pinned elsewhere have had time to end, or they never will.
pub const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(60);
/// A catching-up instance is done once it holds this fraction of its share of
/// the group's pinned flows.
const CATCH_UP_DONE: f64 = 0.9;
/// Largest request body accepted.
const MAX_BODY: u64 = 1 << 20;
/// Request-serving threads.
const WORKERS: usize = 8;

/// The controller could not start.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// The database could not be opened or loaded.
    #[error(transparent)]
    Db(#[from] DbError),
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {msg}")]
    Listen {
        /// Requested address.
        addr: SocketAddr,
        /// Why.
        msg: String,
    },
    /// The stored state no longer compiles.
    #[error("stored state: {0}")]
    Place(#[from] PlaceError),
    /// A thread could not be started.
    #[error("cannot start a thread: {0}")]
    Thread(std::io::Error),
}

/// How to run the controller.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Address to listen on (port 0: any free port; see [`ServerHandle::addr`]).
    pub listen: SocketAddr,
    /// SQLite database file, or `:memory:`.
    pub db: PathBuf,
    /// State backend URL NF instances are given (`redis://127.0.0.1:6379`, `local`).
    pub state_url: String,
}

/// A running controller; [`ServerHandle::shutdown`] (or dropping it) stops it.
pub struct ServerHandle {
    addr: SocketAddr,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl ServerHandle {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its base URL, `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops serving and pushing, and waits for its threads.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.push_cv.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let pushers: Vec<JoinHandle<()>> = std::mem::take(&mut *lock(&self.shared.pushers));
        for t in pushers {
            let _ = t.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What the controller knows about a host beyond its registration (not durable).
#[derive(Debug, Default)]
struct Live {
    last_heard: Option<Instant>,
    reported: Option<u64>,
    last_push: Option<(u64, Instant)>,
    push_error: Option<String>,
    failures: u32,
    /// Its heartbeats carry instance health: its silence suspects its instances
    /// (hosts that only register are not watched).
    reports_health: bool,
}

/// Why an instance is out of its groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DownReason {
    /// Its agent reported it dead or suspected.
    Reported,
    /// Its host went silent.
    HostSilent,
}

/// A drain under way.
#[derive(Debug, Clone)]
struct Drain {
    started: Instant,
    timeout: Duration,
}

/// A chain whose scaler follows an agent metric.
struct AgentSampler {
    sampler: crate::measure::ChainSampler,
    last: Instant,
    latest: Option<crate::api::MeasuredSample>,
}

/// The scaler of one chain, with its bookkeeping.
struct ChainScaler {
    scaler: Scaler,
    middleboxes: Vec<String>,
    /// Scaler events already copied to the event log.
    seen: usize,
    /// Last time fed, ns (the scaler must never see time go back).
    last_ns: u64,
}

/// The event log: a bounded ring, plus failovers waiting for their pushes.
#[derive(Default)]
struct Events {
    ring: VecDeque<EventInfo>,
    next_id: u64,
    /// Event id -> hosts (and the versions) whose push it waits for.
    awaiting_push: BTreeMap<u64, BTreeMap<u32, u64>>,
    /// The last error logged and when (Unix ms): a change that keeps failing
    /// (retried every tick) is logged once a second, not every tick.
    last_error: Option<(String, u64)>,
}

impl Events {
    fn push(&mut self, mut e: EventInfo) -> u64 {
        if e.at_ms == 0 {
            e.at_ms = unix_ms();
        }
        if e.kind == "error" {
            if let Some((msg, at)) = &self.last_error {
                if *msg == e.reason && e.at_ms.saturating_sub(*at) < 1000 {
                    return self.next_id;
                }
            }
            self.last_error = Some((e.reason.clone(), e.at_ms));
        }
        self.next_id += 1;
        e.id = self.next_id;
        log(&format!("event {}: {}", e.kind, e.reason));
        self.ring.push_back(e);
        while self.ring.len() > EVENTS_KEPT {
            if let Some(old) = self.ring.pop_front() {
                self.awaiting_push.remove(&old.id);
            }
        }
        self.next_id
    }

    /// Notes that `host` was sent version `version`: events waiting for it get
    /// their push time once every host they wait for was sent.
    fn pushed(&mut self, host: u32, version: u64) {
        let now = unix_ms();
        let mut done = Vec::new();
        for (id, hosts) in self.awaiting_push.iter_mut() {
            if hosts.get(&host).is_some_and(|v| version >= *v) {
                hosts.remove(&host);
            }
            if hosts.is_empty() {
                done.push(*id);
            }
        }
        for id in done {
            self.awaiting_push.remove(&id);
            if let Some(e) = self.ring.iter_mut().rev().find(|e| e.id == id) {
                e.push_sent_ms = Some(now);
            }
        }
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn event(kind: &str, reason: String) -> EventInfo {
    EventInfo {
        id: 0,
        at_ms: 0,
        kind: kind.into(),
        tenant: None,
        chain: None,
        middlebox: None,
        instance: None,
        host: None,
        reason,
        first_report_ms: None,
        push_sent_ms: None,
        counts: None,
    }
}

struct Core {
    desired: Desired,
    configs: BTreeMap<u32, AgentConfig>,
    db: Db,
    live: BTreeMap<u32, Live>,
    /// Why each instance of `desired.down` is down.
    down_reason: BTreeMap<InstanceKey, DownReason>,
    drains: BTreeMap<InstanceKey, Drain>,
    /// When each catching-up instance started catching up.
    catch_ups: BTreeMap<InstanceKey, Instant>,
    /// Latest chain measurements per host (cumulative counters).
    chain_reports: BTreeMap<u32, Vec<ChainMeasure>>,
    /// Agent-metric samplers by `(tenant, chain)`: the sampler, when it last
    /// sampled, and the latest sample.
    samplers: BTreeMap<(String, String), AgentSampler>,
    /// Latest pinned-flow report per host: (its config version, the flows).
    pinned: BTreeMap<u32, (u64, Vec<PinnedFlows>, Instant)>,
    scalers: BTreeMap<(String, String), ChainScaler>,
    events: Events,
    /// Drain timeouts asked for by scale requests, by instance.
    drain_timeouts: BTreeMap<InstanceKey, Duration>,
    /// Down instances reported healthy since (see [`REJOIN_AFTER`]).
    healthy_since: BTreeMap<InstanceKey, Instant>,
    /// Instances reported suspected (alive) since (see [`SUSPECT_CONFIRM`]).
    suspected_since: BTreeMap<InstanceKey, Instant>,
    /// Ownership leases of `state: cached` middleboxes.
    gate: LeaseGate,
}

#[derive(Default)]
struct PushQueue {
    due: BTreeMap<u32, Instant>,
    in_flight: BTreeSet<u32>,
}

struct Shared {
    core: Mutex<Core>,
    queue: Mutex<PushQueue>,
    push_cv: Condvar,
    pushers: Mutex<Vec<JoinHandle<()>>>,
    stop: AtomicBool,
    state_url: String,
    /// The scaler's clock starts here.
    started: Instant,
}

/// The controller's log: one line on stderr per change (never per heartbeat).
fn log(msg: &str) {
    eprintln!("sluice-controller: {msg}");
}

/// Locks a mutex, carrying on if a panicking thread poisoned it (the state is
/// only ever swapped whole, so it is consistent).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Starts the controller: loads the database, binds, and serves in background
/// threads.
pub fn serve(opts: ServerOptions) -> Result<ServerHandle, ControllerError> {
    let db = Db::open(&opts.db)?;
    let registry = sluice_builtin::registry();
    let (desired, stored) = db.load(Some(&registry))?;
    // The stored configurations are what agents were told; recompute to catch a
    // compiler that changed since, bumping versions only where output differs.
    let mut configs = desired.configs(&opts.state_url)?;
    let mut gate = LeaseGate::restarted(&stored, unix_ms());
    if let LeaseDecision::Hold(held) = gate.decide(&stored, &mut configs, unix_ms()) {
        // Pushed again as they were until the agents confirm them (see
        // `LeaseGate::restarted`); the ticker then commits the desired state.
        configs = held;
    }
    let changed = versioned(&stored, &mut configs);
    let mut db = db;
    if !changed.is_empty() {
        db.save(&desired, &configs)?;
    }
    let server = tiny_http::Server::http(opts.listen).map_err(|e| ControllerError::Listen {
        addr: opts.listen,
        msg: e.to_string(),
    })?;
    let addr = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| ControllerError::Listen {
            addr: opts.listen,
            msg: "not an IP listener".into(),
        })?;
    let server = Arc::new(server);
    let shared = Arc::new(Shared {
        core: Mutex::new(Core {
            desired,
            configs,
            db,
            live: BTreeMap::new(),
            down_reason: BTreeMap::new(),
            drains: BTreeMap::new(),
            catch_ups: BTreeMap::new(),
            chain_reports: BTreeMap::new(),
            samplers: BTreeMap::new(),
            pinned: BTreeMap::new(),
            scalers: BTreeMap::new(),
            events: Events::default(),
            drain_timeouts: BTreeMap::new(),
            healthy_since: BTreeMap::new(),
            suspected_since: BTreeMap::new(),
            gate,
        }),
        queue: Mutex::new(PushQueue::default()),
        push_cv: Condvar::new(),
        pushers: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
        state_url: opts.state_url,
        started: Instant::now(),
    });
    let mut threads = Vec::new();
    for i in 0..WORKERS {
        let (s, sh) = (server.clone(), shared.clone());
        threads.push(
            std::thread::Builder::new()
                .name(format!("ctl-http-{i}"))
                .spawn(move || worker(&s, &sh))
                .map_err(ControllerError::Thread)?,
        );
    }
    let sh = shared.clone();
    threads.push(
        std::thread::Builder::new()
            .name("ctl-ticker".into())
            .spawn(move || ticker(&sh))
            .map_err(ControllerError::Thread)?,
    );
    let sh = shared.clone();
    threads.push(
        std::thread::Builder::new()
            .name("ctl-pusher".into())
            .spawn(move || dispatcher(&sh))
            .map_err(ControllerError::Thread)?,
    );
    Ok(ServerHandle {
        addr,
        shared,
        threads,
    })
}

fn worker(server: &tiny_http::Server, shared: &Arc<Shared>) {
    while !shared.stop.load(Ordering::SeqCst) {
        let req = match server.recv_timeout(Duration::from_millis(100)) {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            // A failed accept (out of file descriptors, ...) must not end the
            // worker: back off and carry on.
            Err(_) => {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        serve_one(shared, req);
    }
}

fn header(name: &str, value: &str) -> Option<tiny_http::Header> {
    tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()).ok()
}

fn serve_one(shared: &Arc<Shared>, mut req: tiny_http::Request) {
    let method = req.method().as_str().to_ascii_uppercase();
    let url = req.url().to_string();
    let ctype = req
        .headers()
        .iter()
        .find(|h| h.field.equiv("Content-Type"))
        .map(|h| h.value.as_str().to_ascii_lowercase());
    let mut body = String::new();
    let read = req.as_reader().take(MAX_BODY + 1).read_to_string(&mut body);
    let reply = match read {
        Err(e) => Err(ApiError::bad(format!(
            "body: cannot read it as UTF-8 text: {e}"
        ))),
        Ok(n) if n as u64 > MAX_BODY => {
            Err(ApiError::bad(format!("body: larger than {MAX_BODY} bytes")))
        }
        Ok(_) => handle(shared, &method, &url, ctype.as_deref(), &body),
    };
    let (code, ctype, text) = match reply {
        Ok(Reply::Json(code, v)) => (code, "application/json", v.to_string()),
        Ok(Reply::Text(ctype, t)) => (200, ctype, t),
        Err(e) => (
            e.status,
            "application/json",
            serde_json::json!({ "error": e.msg }).to_string(),
        ),
    };
    let mut resp = tiny_http::Response::from_string(text).with_status_code(code);
    if let Some(h) = header("Content-Type", ctype) {
        resp = resp.with_header(h);
    }
    // The client may have gone; nothing to do about it.
    let _ = req.respond(resp);
}

/// An error answer.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ApiError {
    status: u16,
    msg: String,
}

impl ApiError {
    fn bad(msg: impl Into<String>) -> ApiError {
        ApiError {
            status: 400,
            msg: msg.into(),
        }
    }
    fn not_found(msg: impl Into<String>) -> ApiError {
        ApiError {
            status: 404,
            msg: msg.into(),
        }
    }
    fn conflict(msg: impl Into<String>) -> ApiError {
        ApiError {
            status: 409,
            msg: msg.into(),
        }
    }
    fn internal(msg: impl Into<String>) -> ApiError {
        ApiError {
            status: 500,
            msg: msg.into(),
        }
    }
}

impl From<PlaceError> for ApiError {
    fn from(e: PlaceError) -> ApiError {
        match e {
            PlaceError::Compile {
                source: crate::CompileError::TooLarge(_),
                ..
            } => ApiError::bad(e.to_string()),
            PlaceError::BadCount(_) => ApiError::bad(e.to_string()),
            PlaceError::UnknownTenant(_) | PlaceError::UnknownMiddlebox { .. } => {
                ApiError::not_found(e.to_string())
            }
            e => ApiError::conflict(e.to_string()),
        }
    }
}

impl From<DbError> for ApiError {
    fn from(e: DbError) -> ApiError {
        ApiError::internal(e.to_string())
    }
}

enum Reply {
    Json(u16, Value),
    Text(&'static str, String),
}

fn json<T: Serialize>(code: u16, v: &T) -> Result<Reply, ApiError> {
    serde_json::to_value(v)
        .map(|v| Reply::Json(code, v))
        .map_err(|e| ApiError::internal(e.to_string()))
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Matches `path` against the route templates: the template and its parameters,
/// or whether the path exists under another method.
fn route(method: &str, path: &str) -> Result<(&'static str, Vec<String>), ApiError> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let mut path_known = false;
    for &(m, tpl) in ROUTES {
        let t: Vec<&str> = tpl.trim_matches('/').split('/').collect();
        if t.len() != segs.len() {
            continue;
        }
        let mut params = Vec::new();
        let ok = t.iter().zip(&segs).all(|(a, b)| {
            if a.starts_with('{') {
                params.push(percent_decode(b));
                !b.is_empty()
            } else {
                a == b
            }
        });
        if !ok {
            continue;
        }
        if m == method {
            return Ok((tpl, params));
        }
        path_known = true;
    }
    if path_known {
        Err(ApiError {
            status: 405,
            msg: format!("{method} is not allowed on {path}"),
        })
    } else {
        Err(ApiError::not_found(format!("no such endpoint: {path}")))
    }
}

fn handle(
    shared: &Arc<Shared>,
    method: &str,
    url: &str,
    ctype: Option<&str>,
    body: &str,
) -> Result<Reply, ApiError> {
    let path = url.split('?').next().unwrap_or("");
    let (tpl, p) = route(method, path)?;
    match (method, tpl) {
        ("GET", "/healthz") => json(200, &serde_json::json!({ "status": "ok" })),
        ("GET", "/v1/openapi.yaml") => Ok(Reply::Text("application/yaml", OPENAPI_YAML.into())),
        ("GET", "/v1/tenants") => list_tenants(shared),
        ("POST", "/v1/tenants") => apply(shared, None, ctype, body),
        ("GET", "/v1/tenants/{name}") => get_tenant(shared, &p[0]),
        ("PUT", "/v1/tenants/{name}") => apply(shared, Some(&p[0]), ctype, body),
        ("DELETE", "/v1/tenants/{name}") => delete_tenant(shared, &p[0]),
        ("GET", "/v1/hosts") => list_hosts(shared),
        ("POST", "/v1/hosts") => heartbeat(shared, body),
        ("GET", "/v1/hosts/{id}/fib") => host_fib(shared, &p[0]),
        ("GET", "/v1/hosts/{id}/config") => host_config(shared, &p[0]),
        ("GET", "/v1/vms") => list_vms(shared),
        ("PUT", "/v1/vms/{tenant}/{name}") => put_vm(shared, &p[0], &p[1], body),
        ("DELETE", "/v1/vms/{tenant}/{name}") => delete_vm(shared, &p[0], &p[1]),
        ("GET", "/v1/instances") => instances(shared),
        ("GET", "/v1/chains") => chains(shared),
        ("GET", "/v1/tenants/{name}/middleboxes/{middlebox}") => {
            get_middlebox(shared, &p[0], &p[1])
        }
        ("PUT", "/v1/tenants/{name}/middleboxes/{middlebox}") => {
            put_middlebox(shared, &p[0], &p[1], body)
        }
        ("POST", "/v1/tenants/{name}/chains/{chain}/metrics") => {
            post_metric(shared, &p[0], &p[1], body)
        }
        ("GET", "/v1/tenants/{name}/chains/{chain}/scaling") => get_scaling(shared, &p[0], &p[1]),
        ("PUT", "/v1/tenants/{name}/chains/{chain}/scaling") => {
            put_scaling(shared, &p[0], &p[1], body)
        }
        ("DELETE", "/v1/tenants/{name}/chains/{chain}/scaling") => {
            delete_scaling(shared, &p[0], &p[1])
        }
        ("POST", "/v1/tenants/{name}/chains/{chain}/scaling/request") => {
            scaling_request(shared, &p[0], &p[1], body)
        }
        ("GET", "/v1/events") => list_events(shared, url),
        _ => Err(ApiError::not_found(format!("no such endpoint: {path}"))),
    }
}

impl Shared {
    /// Makes `next` the desired state if every host's configuration can be
    /// derived from it: persists it, bumps versions of changed hosts and schedules
    /// their pushes. Returns the changed hosts and their new versions.
    fn commit(&self, core: &mut Core, next: Desired) -> Result<BTreeMap<u32, u64>, ApiError> {
        let mut cfgs = next.configs(&self.state_url)?;
        let was_holding = core.gate.holding();
        let held = match core.gate.decide(&core.configs, &mut cfgs, unix_ms()) {
            LeaseDecision::Apply => false,
            LeaseDecision::Hold(interim) => {
                cfgs = interim;
                true
            }
        };
        let changed = versioned(&core.configs, &mut cfgs);
        if held {
            core.gate.held_versions(&cfgs);
            if !was_holding {
                log("leased split changing: leases revoked first; the new configuration follows once the agents confirm");
            }
        }
        if next != core.desired || !changed.is_empty() {
            core.db.save(&next, &cfgs)?;
        }
        core.desired = next;
        core.configs = cfgs;
        let out: BTreeMap<u32, u64> = changed
            .iter()
            .map(|h| (*h, core.configs[h].version))
            .collect();
        if !out.is_empty() {
            log(&format!(
                "new configuration versions (host: version): {out:?}"
            ));
        }
        for h in changed {
            self.schedule(h, Instant::now());
        }
        Ok(out)
    }

    fn schedule(&self, host: u32, at: Instant) {
        let mut q = lock(&self.queue);
        let e = q.due.entry(host).or_insert(at);
        if at < *e {
            *e = at;
        }
        drop(q);
        self.push_cv.notify_all();
    }
}

fn instance_infos(d: &Desired, tenant: Option<&str>) -> Vec<InstanceInfo> {
    d.instances
        .iter()
        .filter(|(k, _)| tenant.is_none_or(|t| t == k.0))
        .map(|(key @ (t, mb, k), i)| InstanceInfo {
            name: instance_name(t, mb, *k),
            tenant: t.clone(),
            middlebox: mb.clone(),
            host: i.host,
            port: i.port,
            state: if d.draining.contains(key) {
                "draining"
            } else if d.down.contains(key) {
                "down"
            } else {
                "placed"
            }
            .into(),
            alive: None,
            pid: None,
        })
        .collect()
}

fn entries_of(configs: &BTreeMap<u32, AgentConfig>, tenant: &str) -> BTreeMap<u32, usize> {
    configs
        .iter()
        .filter_map(|(h, c)| {
            c.tenants
                .iter()
                .find(|t| t.tenant == tenant)
                .map(|t| (*h, t.entries.len()))
        })
        .collect()
}

fn apply(
    shared: &Shared,
    url_name: Option<&str>,
    ctype: Option<&str>,
    body: &str,
) -> Result<Reply, ApiError> {
    if let Some(ct) = ctype {
        let base = ct.split(';').next().unwrap_or("").trim();
        if !matches!(
            base,
            "text/yaml"
                | "application/yaml"
                | "application/x-yaml"
                | "text/x-yaml"
                | "text/plain"
                | "application/json"
                | ""
        ) {
            return Err(ApiError::bad(format!(
                "Content-Type: `{base}` is not a tenant spec (send text/yaml or application/yaml)"
            )));
        }
    }
    let registry = sluice_builtin::registry();
    let spec = TenantSpec::parse(body, "spec", Some(&registry))
        .map_err(|e| ApiError::bad(e.to_string()))?;
    if let Some(n) = url_name {
        if n != spec.tenant {
            return Err(ApiError::bad(format!(
                "tenant: the spec is for tenant `{}` but the URL names `{n}`",
                spec.tenant
            )));
        }
    }
    let name = spec.tenant.clone();
    let mut core = lock(&shared.core);
    let existed = core.desired.tenants.contains_key(&name);
    let mut next = core.desired.clone();
    let changed = next.apply_tenant(body, spec)?;
    let pushed = if changed {
        shared.commit(&mut core, next)?
    } else {
        BTreeMap::new()
    };
    log(&format!(
        "tenant {name}: {}",
        if changed {
            "applied"
        } else {
            "re-applied unchanged"
        }
    ));
    let t = &core.desired.tenants[&name];
    let summary = ApplySummary {
        tenant: name.clone(),
        vni: t.vni,
        generation: t.generation,
        changed,
        chains: t.spec.chains.iter().map(|c| c.name.clone()).collect(),
        instances: instance_infos(&core.desired, Some(&name)),
        entries: entries_of(&core.configs, &name),
        pushed,
    };
    json(if existed { 200 } else { 201 }, &summary)
}

fn list_tenants(shared: &Shared) -> Result<Reply, ApiError> {
    let core = lock(&shared.core);
    let v: Vec<TenantSummary> = core
        .desired
        .tenants
        .values()
        .map(|t| TenantSummary {
            tenant: t.name.clone(),
            vni: t.vni,
            generation: t.generation,
            chains: t.spec.chains.len(),
            instances: core
                .desired
                .instances
                .keys()
                .filter(|k| k.0 == t.name)
                .count(),
            entries: entries_of(&core.configs, &t.name).values().sum(),
        })
        .collect();
    json(200, &v)
}

fn get_tenant(shared: &Shared, name: &str) -> Result<Reply, ApiError> {
    let core = lock(&shared.core);
    let t = core
        .desired
        .tenants
        .get(name)
        .ok_or_else(|| ApiError::not_found(format!("tenant `{name}` is not applied")))?;
    json(
        200,
        &TenantDetail {
            tenant: t.name.clone(),
            vni: t.vni,
            generation: t.generation,
            spec: t.yaml.clone(),
            chains: t.spec.chains.iter().map(|c| c.name.clone()).collect(),
            instances: instance_infos(&core.desired, Some(name)),
            entries: entries_of(&core.configs, name),
            vms: core
                .desired
                .vms
                .keys()
                .filter(|k| k.0 == name)
                .map(|k| k.1.clone())
                .collect(),
        },
    )
}

fn delete_tenant(shared: &Shared, name: &str) -> Result<Reply, ApiError> {
    let mut core = lock(&shared.core);
    let mut next = core.desired.clone();
    if !next.remove_tenant(name) {
        return Err(ApiError::not_found(format!(
            "tenant `{name}` is not applied"
        )));
    }
    let pushed = shared.commit(&mut core, next)?;
    log(&format!("tenant {name}: deleted"));
    json(
        200,
        &Deleted {
            deleted: format!("tenant {name}"),
            pushed,
        },
    )
}

fn host_infos(core: &Core) -> Vec<HostInfo> {
    core.desired
        .hosts
        .values()
        .map(|h| {
            let live = core.live.get(&h.id);
            let heard = live.and_then(|l| l.last_heard).map(|t| t.elapsed());
            let desired = core.configs.get(&h.id).map(|c| c.version).unwrap_or(0);
            let reported = live.and_then(|l| l.reported);
            HostInfo {
                id: h.id,
                name: h.name.clone(),
                underlay: h.underlay.to_string(),
                api: h.api.clone(),
                last_heartbeat_ms: heard.map(|d| d.as_millis() as u64),
                alive: heard.is_some_and(|d| d <= ALIVE),
                desired_version: desired,
                reported_version: reported,
                in_sync: reported == Some(desired),
                push_error: live.and_then(|l| l.push_error.clone()),
            }
        })
        .collect()
}

fn list_hosts(shared: &Shared) -> Result<Reply, ApiError> {
    let core = lock(&shared.core);
    json(200, &host_infos(&core))
}

fn heartbeat(shared: &Shared, body: &str) -> Result<Reply, ApiError> {
    let raw: Value = serde_json::from_str(body).map_err(|e| ApiError::bad(format!("body: {e}")))?;
    // Pinned-flow counts ride along if the agent sends them (else drains poll
    // its status).
    let pinned: Option<Vec<PinnedFlows>> = raw
        .get("pinned_flows")
        .and_then(|v| serde_json::from_value(v.clone()).ok());
    let reports_health = raw.get("instances").is_some();
    let hb: HostHeartbeat =
        serde_json::from_value(raw).map_err(|e| ApiError::bad(format!("body: {e}")))?;
    let reg = hb.registration;
    if reg.host == 0 {
        return Err(ApiError::bad("host: ids start at 1"));
    }
    if !reg.api.starts_with("http://") {
        return Err(ApiError::bad(format!(
            "api: `{}` is not an http:// URL",
            reg.api
        )));
    }
    let host = Host {
        id: reg.host,
        name: reg.name.clone(),
        underlay: reg.underlay,
        api: reg.api.trim_end_matches('/').to_string(),
    };
    let mut core = lock(&shared.core);
    if core.desired.hosts.get(&reg.host) != Some(&host) {
        log(&format!(
            "host {} registered: {} underlay {} api {}",
            host.id, host.name, host.underlay, host.api
        ));
        let mut next = core.desired.clone();
        next.hosts.insert(reg.host, host);
        shared.commit(&mut core, next)?;
    }
    let now = Instant::now();
    let mut desired = core.configs.get(&reg.host).map(|c| c.version).unwrap_or(0);
    if reg.config_version > desired {
        // The agent runs a version from an earlier life of the controller (a lost
        // database): move past it so versions keep increasing for the agent.
        if let Some(c) = core.configs.get_mut(&reg.host) {
            c.version = reg.config_version + 1;
            desired = c.version;
        }
        let Core {
            desired: d,
            configs,
            db,
            ..
        } = &mut *core;
        db.save(d, configs)?;
    }
    {
        let live = core.live.entry(reg.host).or_default();
        live.last_heard = Some(now);
        live.reported = Some(reg.config_version);
        live.reports_health |= reports_health;
    }
    if let Some(p) = pinned {
        core.pinned.insert(reg.host, (reg.config_version, p, now));
    }
    if !hb.chains.is_empty() {
        core.chain_reports.insert(reg.host, hb.chains.clone());
    }
    health(shared, &mut core, reg.host, &hb.instances);
    // A failover may just have given this host a new version.
    let desired = core.configs.get(&reg.host).map_or(desired, |c| c.version);
    let live = core.live.entry(reg.host).or_default();
    let stale = reg.config_version != desired
        && live
            .last_push
            .is_none_or(|(v, at)| v != desired || now.duration_since(at) >= REPUSH_AFTER);
    drop(core);
    if stale {
        shared.schedule(reg.host, now);
    }
    json(
        200,
        &HostAck {
            host: reg.host,
            desired_version: desired,
        },
    )
}

fn parse_host(core: &Core, id: &str) -> Result<u32, ApiError> {
    let h: u32 = id
        .parse()
        .map_err(|_| ApiError::bad(format!("id: `{id}` is not a host id")))?;
    if !core.desired.hosts.contains_key(&h) {
        return Err(ApiError::not_found(format!("host {h} is not registered")));
    }
    Ok(h)
}

fn host_fib(shared: &Shared, id: &str) -> Result<Reply, ApiError> {
    let core = lock(&shared.core);
    let h = parse_host(&core, id)?;
    let cfg = core.configs.get(&h).cloned().unwrap_or_default();
    json(
        200,
        &HostFibInfo {
            host: h,
            version: cfg.version,
            tenants: cfg.tenants,
        },
    )
}

fn host_config(shared: &Shared, id: &str) -> Result<Reply, ApiError> {
    let core = lock(&shared.core);
    let h = parse_host(&core, id)?;
    json(200, &core.configs.get(&h).cloned().unwrap_or_default())
}

fn vm_info(d: &Desired, vm: &crate::place::Vm) -> VmInfo {
    VmInfo {
        tenant: vm.reg.tenant.clone(),
        name: vm.reg.name.clone(),
        host: vm.reg.host,
        port: vm.port,
        iface: vm.reg.iface.clone(),
        mac: vm.reg.mac.clone(),
        addr: vm.reg.addr.to_string(),
        gateway: vm.reg.gateway,
        applied: d.tenants.contains_key(&vm.reg.tenant),
    }
}

fn list_vms(shared: &Shared) -> Result<Reply, ApiError> {
    let core = lock(&shared.core);
    let v: Vec<VmInfo> = core
        .desired
        .vms
        .values()
        .map(|vm| vm_info(&core.desired, vm))
        .collect();
    json(200, &v)
}

fn put_vm(shared: &Shared, tenant: &str, name: &str, body: &str) -> Result<Reply, ApiError> {
    let reg: VmRegistration =
        serde_json::from_str(body).map_err(|e| ApiError::bad(format!("body: {e}")))?;
    if reg.tenant != tenant {
        return Err(ApiError::bad(format!(
            "tenant: the body names tenant `{}` but the URL names `{tenant}`",
            reg.tenant
        )));
    }
    if reg.name != name {
        return Err(ApiError::bad(format!(
            "name: the body names VM `{}` but the URL names `{name}`",
            reg.name
        )));
    }
    if reg.host == 0 {
        return Err(ApiError::bad("host: ids start at 1"));
    }
    if reg.iface.is_empty() {
        return Err(ApiError::bad("iface: must not be empty"));
    }
    let mut core = lock(&shared.core);
    let existed = core
        .desired
        .vms
        .contains_key(&(tenant.to_string(), name.to_string()));
    let mut next = core.desired.clone();
    next.register_vm(reg)?;
    shared.commit(&mut core, next)?;
    let vm = &core.desired.vms[&(tenant.to_string(), name.to_string())];
    json(if existed { 200 } else { 201 }, &vm_info(&core.desired, vm))
}

fn delete_vm(shared: &Shared, tenant: &str, name: &str) -> Result<Reply, ApiError> {
    let mut core = lock(&shared.core);
    let mut next = core.desired.clone();
    if next
        .vms
        .remove(&(tenant.to_string(), name.to_string()))
        .is_none()
    {
        return Err(ApiError::not_found(format!(
            "VM `{name}` of tenant `{tenant}` is not registered"
        )));
    }
    let pushed = shared.commit(&mut core, next).map_err(|e| {
        if e.status == 409 {
            ApiError::conflict(format!(
                "cannot delete VM `{tenant}/{name}` while tenant `{tenant}` needs it: {}",
                e.msg
            ))
        } else {
            e
        }
    })?;
    json(
        200,
        &Deleted {
            deleted: format!("vm {tenant}/{name}"),
            pushed,
        },
    )
}

fn chains(shared: &Shared) -> Result<Reply, ApiError> {
    let core = lock(&shared.core);
    let mut v = Vec::new();
    for t in core.desired.tenants.values() {
        for (i, c) in t.spec.chains.iter().enumerate() {
            v.push(ChainInfo {
                tenant: t.name.clone(),
                chain: c.name.clone(),
                id: (2 * i) as u16,
                reverse_id: c.bidirectional.then_some((2 * i + 1) as u16),
                path: c.path.clone(),
                bidirectional: c.bidirectional,
                mirror: c.mirror.clone(),
            });
        }
    }
    json(200, &v)
}

fn instances(shared: &Shared) -> Result<Reply, ApiError> {
    let (mut list, apis) = {
        let core = lock(&shared.core);
        let list = instance_infos(&core.desired, None);
        let hosts: BTreeSet<u32> = list.iter().map(|i| i.host).collect();
        let apis: Vec<(u32, String)> = hosts
            .into_iter()
            .filter_map(|h| core.desired.hosts.get(&h).map(|x| (h, x.api.clone())))
            .collect();
        (list, apis)
    };
    // Ask the agents in parallel, outside the lock, with short timeouts.
    let agent = ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_millis(300))
        .timeout(Duration::from_millis(800))
        .build();
    let statuses: BTreeMap<u32, AgentStatus> = std::thread::scope(|s| {
        let hs: Vec<_> = apis
            .iter()
            .map(|(h, api)| {
                let agent = agent.clone();
                s.spawn(move || {
                    agent
                        .get(&format!("{api}/v1/status"))
                        .call()
                        .ok()
                        .and_then(|r| r.into_json::<AgentStatus>().ok())
                        .map(|st| (*h, st))
                })
            })
            .collect();
        hs.into_iter()
            .filter_map(|h| h.join().ok().flatten())
            .collect()
    });
    for i in &mut list {
        let found = statuses
            .get(&i.host)
            .and_then(|st| st.instances.iter().find(|x| x.name == i.name));
        match found {
            Some(x) => {
                i.alive = Some(x.alive);
                i.pid = x.pid;
                i.state = if x.alive { "alive" } else { "dead" }.into();
            }
            None => i.state = "unknown".into(),
        }
    }
    json(200, &list)
}

/// Sends due configurations, one thread per host push (at most one in flight per
/// host), until the server stops.
fn dispatcher(shared: &Arc<Shared>) {
    let mut q = lock(&shared.queue);
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let now = Instant::now();
        let due: Vec<u32> = q
            .due
            .iter()
            .filter(|(h, at)| **at <= now && !q.in_flight.contains(h))
            .map(|(h, _)| *h)
            .collect();
        for h in due {
            q.due.remove(&h);
            q.in_flight.insert(h);
            let sh = shared.clone();
            let t = std::thread::Builder::new()
                .name(format!("ctl-push-{h}"))
                .spawn(move || push_one(&sh, h));
            match t {
                Ok(t) => {
                    let mut p = lock(&shared.pushers);
                    p.retain(|t| !t.is_finished());
                    p.push(t);
                }
                Err(_) => {
                    // Try again shortly.
                    q.in_flight.remove(&h);
                    q.due.insert(h, now + Duration::from_millis(200));
                }
            }
        }
        let next = q
            .due
            .iter()
            .filter(|(h, _)| !q.in_flight.contains(h))
            .map(|(_, at)| *at)
            .min();
        let wait = next
            .map(|at| at.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_millis(500))
            .clamp(Duration::from_millis(1), Duration::from_millis(500));
        q = shared
            .push_cv
            .wait_timeout(q, wait)
            .map(|(g, _)| g)
            .unwrap_or_else(|p| p.into_inner().0);
    }
}

fn push_one(shared: &Shared, host: u32) {
    let job = {
        let mut core = lock(&shared.core);
        let api = core.desired.hosts.get(&host).map(|h| h.api.clone());
        let cfg = core.configs.get(&host).cloned();
        match (api, cfg) {
            (Some(api), Some(cfg)) => {
                core.live.entry(host).or_default().last_push = Some((cfg.version, Instant::now()));
                core.events.pushed(host, cfg.version);
                Some((api, cfg))
            }
            _ => None,
        }
    };
    let mut retry = None;
    if let Some((api, cfg)) = job {
        let r = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_millis(500))
            // The agent answers once its data plane runs the new configuration.
            .timeout(Duration::from_secs(10))
            .build()
            .put(&format!("{api}/v1/config"))
            .send_json(&cfg);
        let err = match r {
            Ok(_) => None,
            Err(ureq::Error::Status(code, resp)) => Some(format!(
                "agent refused version {}: HTTP {code}: {}",
                cfg.version,
                resp.into_string().unwrap_or_default()
            )),
            Err(e) => Some(format!("cannot reach agent at {api}: {e}")),
        };
        let mut core = lock(&shared.core);
        let live = core.live.entry(host).or_default();
        match err {
            None => {
                if live.push_error.is_some() {
                    log(&format!(
                        "host {host}: push of version {} succeeded",
                        cfg.version
                    ));
                }
                live.push_error = None;
                live.failures = 0;
            }
            Some(e) => {
                if live.push_error.as_deref() != Some(e.as_str()) {
                    log(&format!("host {host}: push failed (retrying): {e}"));
                }
                live.push_error = Some(e);
                live.failures = live.failures.saturating_add(1);
                let backoff = 100u64 << live.failures.min(6);
                retry = Some(Instant::now() + Duration::from_millis(backoff.min(5000)));
            }
        }
    }
    let mut q = lock(&shared.queue);
    q.in_flight.remove(&host);
    if let Some(at) = retry {
        if !shared.stop.load(Ordering::SeqCst) {
            let e = q.due.entry(host).or_insert(at);
            if at < *e {
                *e = at;
            }
        }
    }
    drop(q);
    shared.push_cv.notify_all();
}

/// Applies the instance health `host` reported: instances newly dead or
/// suspected leave their groups, recovered ones rejoin (and instances out only
/// because the host was silent rejoin now that it is heard, unless reported bad).
fn health(shared: &Shared, core: &mut Core, host: u32, report: &[sluice_proto::InstanceHealth]) {
    let mut changes: Vec<(InstanceKey, bool, String)> = Vec::new();
    let mut mentioned = BTreeSet::new();
    for ih in report {
        let Some((key, inst)) = core.desired.instance_by_name(&ih.name) else {
            continue;
        };
        // A report from a host the instance no longer runs on is stale.
        if inst.host != host {
            continue;
        }
        let key = key.clone();
        mentioned.insert(key.clone());
        // Dead (its process gone after it ran) or suspected. An instance never
        // heard from and not suspected is still starting: left alone, as the
        // agent does, so new instances do not churn every host's groups.
        // A local-state instance is failed over only when its process is gone:
        // moving its flows on a mere suspicion would break them (their state is
        // inside it), while a slow instance may well answer again.
        let local = core.desired.local_state(&key.0, &key.1);
        let dead = !ih.alive && ih.last_heartbeat_age_ms.is_some();
        let suspected = ih.suspected && !local;
        // Suspected for SUSPECT_CONFIRM, report after report.
        let confirmed = suspected && {
            let since = *core
                .suspected_since
                .entry(key.clone())
                .or_insert_with(Instant::now);
            since.elapsed() >= SUSPECT_CONFIRM
        };
        if !suspected {
            core.suspected_since.remove(&key);
        }
        let bad = confirmed || dead;
        let healthy = !suspected && !dead;
        if !healthy {
            core.healthy_since.remove(&key);
        }
        let is_down = core.desired.down.contains(&key);
        if bad && !is_down {
            let why = if !ih.alive {
                format!("host {host} reports its process dead")
            } else {
                format!(
                    "host {host} suspects it (last heartbeat: {})",
                    ih.last_heartbeat_age_ms
                        .map_or("never".to_string(), |a| format!("{a} ms ago"))
                )
            };
            changes.push((key, true, why));
        } else if healthy && is_down {
            let since = *core
                .healthy_since
                .entry(key.clone())
                .or_insert_with(Instant::now);
            if since.elapsed() >= REJOIN_AFTER {
                changes.push((
                    key,
                    false,
                    format!(
                        "host {host} reports it alive (for {} ms)",
                        since.elapsed().as_millis()
                    ),
                ));
            }
            continue;
        } else if bad && is_down {
            core.down_reason.insert(key, DownReason::Reported);
        }
    }
    let silent: Vec<InstanceKey> = core
        .down_reason
        .iter()
        .filter(|(k, r)| {
            **r == DownReason::HostSilent
                && !mentioned.contains(*k)
                && core
                    .desired
                    .instances
                    .get(*k)
                    .is_some_and(|i| i.host == host)
        })
        .map(|(k, _)| k.clone())
        .collect();
    for k in silent {
        changes.push((k, false, format!("host {host} is heard from again")));
    }
    apply_health(shared, core, changes, DownReason::Reported);
}

/// Takes instances out of (`true`) or back into their groups in one commit, and
/// logs an event per instance.
fn apply_health(
    shared: &Shared,
    core: &mut Core,
    changes: Vec<(InstanceKey, bool, String)>,
    reason: DownReason,
) {
    if changes.is_empty() {
        return;
    }
    let first = unix_ms();
    let mut next = core.desired.clone();
    for (k, down, _) in &changes {
        if *down {
            next.down.insert(k.clone());
        } else {
            next.down.remove(k);
        }
    }
    match shared.commit(core, next) {
        Ok(pushed) => {
            for (k, down, why) in changes {
                core.healthy_since.remove(&k);
                if down {
                    core.down_reason.insert(k.clone(), reason);
                } else {
                    core.down_reason.remove(&k);
                }
                let name = instance_name(&k.0, &k.1, k.2);
                let effect = if pushed.is_empty() {
                    "no host's configuration changed (no other instance of its middlebox is up)"
                        .to_string()
                } else {
                    format!(
                        "groups of {} rewritten on hosts {:?}",
                        k.1,
                        pushed.keys().collect::<Vec<_>>()
                    )
                };
                let mut e = event(
                    if down { "failover" } else { "rejoin" },
                    format!(
                        "{name} {}: {why}; {effect}",
                        if down {
                            "out of its groups"
                        } else {
                            "back in its groups"
                        }
                    ),
                );
                e.host = core.desired.instances.get(&k).map(|i| i.host);
                e.tenant = Some(k.0.clone());
                e.middlebox = Some(k.1.clone());
                e.instance = Some(name);
                e.first_report_ms = Some(first);
                let id = core.events.push(e);
                if !pushed.is_empty() {
                    core.events.awaiting_push.insert(id, pushed.clone());
                }
            }
        }
        Err(e) => {
            core.events.push(event(
                "error",
                format!("health change not applied: {}", e.msg),
            ));
        }
    }
}

/// Watches host silence and drains until the server stops.
fn ticker(shared: &Arc<Shared>) {
    let polling: Arc<Mutex<BTreeSet<u32>>> = Arc::default();
    let mut last_poll: BTreeMap<u32, Instant> = BTreeMap::new();
    let mut last_tick = Instant::now();
    while !shared.stop.load(Ordering::SeqCst) {
        std::thread::sleep(TICK);
        // A tick this late means the controller itself stalled (CPU, disk):
        // heartbeats may be queued unread, so silence proves nothing this time.
        let stalled = last_tick.elapsed() > HOST_SILENT / 2;
        last_tick = Instant::now();
        let polls = {
            let mut core = lock(&shared.core);
            if !stalled {
                check_silence(shared, &mut core);
            }
            sample_agent_metrics(shared, &mut core);
            check_leases(shared, &mut core);
            let mut polls = check_drains(shared, &mut core);
            for p in check_catch_ups(shared, &mut core) {
                if !polls.contains(&p) {
                    polls.push(p);
                }
            }
            polls
        };
        let now = Instant::now();
        for (h, api) in polls {
            if last_poll
                .get(&h)
                .is_some_and(|t| now.duration_since(*t) < DRAIN_POLL)
                || !lock(&polling).insert(h)
            {
                continue;
            }
            last_poll.insert(h, now);
            let (sh, pl) = (shared.clone(), polling.clone());
            let t = std::thread::Builder::new()
                .name(format!("ctl-poll-{h}"))
                .spawn(move || {
                    poll_pinned(&sh, h, &api);
                    lock(&pl).remove(&h);
                });
            match t {
                Ok(t) => {
                    let mut p = lock(&shared.pushers);
                    p.retain(|t| !t.is_finished());
                    p.push(t);
                }
                Err(_) => {
                    lock(&polling).remove(&h);
                }
            }
        }
    }
}

/// Ends lease revocations whose agents confirmed them and grants leases to
/// groups every agent has run for a while (see [`crate::lease`]): either way the
/// desired state is committed again, so what was held back, or the new lease,
/// goes out.
fn check_leases(shared: &Shared, core: &mut Core) {
    let now = unix_ms();
    let reported: BTreeMap<u32, u64> = core
        .live
        .iter()
        .filter_map(|(h, l)| l.reported.map(|v| (*h, v)))
        .collect();
    let done = core.gate.barrier_done(now, &reported);
    let granted = core.gate.observe(&core.configs, &reported, now);
    if done || granted {
        if granted {
            log(&format!("leases granted: {:?}", core.gate.granted()));
        }
        let d = core.desired.clone();
        if let Err(e) = shared.commit(core, d) {
            log(&format!(
                "committing after a lease change failed: {}",
                e.msg
            ));
        }
    }
}

/// Asks an agent for its pinned flows (what a drain waits for).
fn poll_pinned(shared: &Shared, host: u32, api: &str) {
    let st = ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_millis(200))
        .timeout(Duration::from_millis(500))
        .build()
        .get(&format!("{api}/v1/status"))
        .call()
        .ok()
        .and_then(|r| r.into_json::<AgentStatus>().ok());
    if let Some(st) = st {
        lock(&shared.core)
            .pinned
            .insert(host, (st.config_version, st.pinned_flows, Instant::now()));
    }
}

/// Suspects every instance of a health-reporting host silent for [`HOST_SILENT`].
/// When every watched host (two or more) is silent at once, the controller (or
/// the management network) is the likelier culprit: nothing is suspected.
fn check_silence(shared: &Shared, core: &mut Core) {
    let watched = core.live.values().filter(|l| l.reports_health).count();
    let silent: BTreeMap<u32, Duration> = core
        .live
        .iter()
        .filter(|(_, l)| l.reports_health)
        .filter_map(|(h, l)| l.last_heard.map(|t| (*h, t.elapsed())))
        .filter(|(_, d)| *d > HOST_SILENT)
        .collect();
    if silent.is_empty() || (watched >= 2 && silent.len() == watched) {
        return;
    }
    let changes: Vec<(InstanceKey, bool, String)> = core
        .desired
        .instances
        .iter()
        .filter(|(k, i)| silent.contains_key(&i.host) && !core.desired.down.contains(*k))
        .map(|(k, i)| {
            (
                k.clone(),
                true,
                format!(
                    "host {} silent for {} ms (its agent may be gone)",
                    i.host,
                    silent[&i.host].as_millis()
                ),
            )
        })
        .collect();
    apply_health(shared, core, changes, DownReason::HostSilent);
}

/// The (host, vni, target) pairs whose pinned flows keep a draining instance.
fn drain_pairs(core: &Core, key: &InstanceKey) -> Vec<(u32, u32, Output)> {
    let (Some(inst), Some(t)) = (
        core.desired.instances.get(key),
        core.desired.tenants.get(&key.0),
    ) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (h, cfg) in &core.configs {
        let o = if *h == inst.host {
            Output::Port(PortId(inst.port))
        } else {
            Output::Host(HostId(inst.host))
        };
        if cfg
            .group_policies
            .iter()
            .any(|gp| gp.vni == t.vni && gp.draining.contains(&o))
        {
            out.push((*h, t.vni, o));
        }
    }
    out
}

/// Feeds the scalers that follow an agent metric: every `metric_interval_ms`,
/// the agents' counters of the chain since the last sample.
fn sample_agent_metrics(shared: &Shared, core: &mut Core) {
    use crate::measure::{chain_totals, AgentMetric, ChainSampler};
    let now = Instant::now();
    let wanted: Vec<((String, String), AgentMetric, u64)> = core
        .desired
        .scaling
        .iter()
        .filter_map(|(k, c)| {
            let m = AgentMetric::parse(&c.metric).ok()??;
            Some((k.clone(), m, c.metric_interval_ms.max(1)))
        })
        .collect();
    core.samplers
        .retain(|k, _| wanted.iter().any(|(w, _, _)| w == k));
    for ((tenant, chain), metric, every) in wanted {
        let key = (tenant.clone(), chain.clone());
        let Some(t) = core.desired.tenants.get(&tenant) else {
            continue;
        };
        let Some(index) = t.spec.chains.iter().position(|c| c.name == chain) else {
            continue;
        };
        let vni = t.vni;
        let due = core
            .samplers
            .get(&key)
            .is_none_or(|s| now.duration_since(s.last) >= Duration::from_millis(every));
        if !due {
            continue;
        }
        let totals: BTreeMap<u32, crate::measure::Totals> = core
            .chain_reports
            .iter()
            .map(|(h, r)| (*h, chain_totals(r, vni, index)))
            .collect();
        let s = core.samplers.entry(key.clone()).or_insert(AgentSampler {
            sampler: ChainSampler::default(),
            last: now,
            latest: None,
        });
        let interval_ms = now.duration_since(s.last).as_millis() as u64;
        s.last = now;
        let Some(m) = s.sampler.sample(&totals, interval_ms) else {
            continue;
        };
        let value = m.value(metric);
        s.latest = Some(crate::api::MeasuredSample {
            at_ms: unix_ms(),
            value,
            sample: m,
        });
        let Some(v) = value else {
            continue;
        };
        let clock = shared.started.elapsed().as_nanos() as u64;
        let decisions = match scaler_of(core, &tenant, &chain) {
            Ok(Some(cs)) => {
                let ns = clock.max(cs.last_ns);
                cs.last_ns = ns;
                cs.scaler.observe(ns, v)
            }
            Ok(None) => continue,
            Err(e) => {
                core.events.push(event(
                    "error",
                    format!("scaler of {tenant}/{chain}: {}", e.msg),
                ));
                continue;
            }
        };
        run_decisions(shared, core, &tenant, &chain, &decisions);
    }
}

/// Flows pinned to the instance `key` on its own host (where every flow it
/// serves is pinned to its port), if that host reported since `since` with a
/// configuration at least as new as the one pushed to it.
fn pinned_on_own_host(core: &Core, key: &InstanceKey, since: Instant) -> Option<u64> {
    let inst = core.desired.instances.get(key)?;
    let vni = core.desired.tenants.get(&key.0)?.vni;
    let want = core.configs.get(&inst.host).map_or(0, |c| c.version);
    let (v, flows, at) = core.pinned.get(&inst.host)?;
    if *v < want || *at < since {
        return None;
    }
    let o = Output::Port(PortId(inst.port));
    Some(
        flows
            .iter()
            .filter(|f| f.vni == vni && f.target == o)
            .map(|f| f.flows)
            .sum(),
    )
}

/// Whether a catching-up instance holding `mine` of `total` pinned flows over
/// `instances` serving ones has reached its share.
pub fn caught_up(mine: u64, total: u64, instances: usize) -> bool {
    let share = total as f64 / instances.max(1) as f64;
    mine as f64 >= CATCH_UP_DONE * share
}

/// Ends the catch-up of new instances of pinned middleboxes that hold their
/// share of pinned flows (or ran out of time); returns the hosts to ask for
/// their pinned flows.
fn check_catch_ups(shared: &Shared, core: &mut Core) -> Vec<(u32, String)> {
    let now = Instant::now();
    let catching = core.desired.catching_up.clone();
    core.catch_ups.retain(|k, _| catching.contains(k));
    let mut finished = Vec::new();
    let mut polls = BTreeSet::new();
    for k in &catching {
        let started = match core.catch_ups.get(k) {
            Some(t) => *t,
            None => {
                core.catch_ups.insert(k.clone(), now);
                let name = instance_name(&k.0, &k.1, k.2);
                let mut e = event(
                    "catch-up",
                    format!(
                        "{name} gets {:.0}% of new flows until it holds its share of pinned flows",
                        crate::place::CATCH_UP_SHARE * 100.0
                    ),
                );
                e.tenant = Some(k.0.clone());
                e.middlebox = Some(k.1.clone());
                e.instance = Some(name);
                core.events.push(e);
                now
            }
        };
        if now.duration_since(started) >= CATCH_UP_TIMEOUT {
            finished.push((
                k.clone(),
                format!(
                    "{} s passed (flows pinned elsewhere last long)",
                    CATCH_UP_TIMEOUT.as_secs()
                ),
            ));
            continue;
        }
        let serving: Vec<InstanceKey> = core
            .desired
            .instances
            .keys()
            .filter(|j| j.0 == k.0 && j.1 == k.1)
            .filter(|j| !core.desired.draining.contains(*j) && !core.desired.down.contains(*j))
            .cloned()
            .collect();
        let mut counts = Vec::new();
        for j in &serving {
            match pinned_on_own_host(core, j, started) {
                Some(n) => counts.push((j == k, n)),
                None => {
                    if let Some(i) = core.desired.instances.get(j) {
                        polls.insert(i.host);
                    }
                }
            }
        }
        if counts.len() < serving.len() {
            continue;
        }
        let mine: u64 = counts.iter().filter(|c| c.0).map(|c| c.1).sum();
        let total: u64 = counts.iter().map(|c| c.1).sum();
        if caught_up(mine, total, serving.len()) {
            finished.push((
                k.clone(),
                format!(
                    "it holds {mine} of {total} pinned flows over {} instances",
                    serving.len()
                ),
            ));
        } else {
            for j in &serving {
                if let Some(i) = core.desired.instances.get(j) {
                    polls.insert(i.host);
                }
            }
        }
    }
    if !finished.is_empty() {
        let mut next = core.desired.clone();
        for (k, _) in &finished {
            next.end_catch_up(k);
        }
        match shared.commit(core, next) {
            Ok(_) => {
                for (k, why) in finished {
                    core.catch_ups.remove(&k);
                    let name = instance_name(&k.0, &k.1, k.2);
                    let mut e = event(
                        "catch-up",
                        format!("{name} caught up, its group back to the target split: {why}"),
                    );
                    e.tenant = Some(k.0.clone());
                    e.middlebox = Some(k.1.clone());
                    e.instance = Some(name);
                    core.events.push(e);
                }
            }
            Err(e) => {
                core.events.push(event(
                    "error",
                    format!("catch-up end not applied: {}", e.msg),
                ));
            }
        }
    }
    polls
        .into_iter()
        .filter_map(|h| core.desired.hosts.get(&h).map(|x| (h, x.api.clone())))
        .collect()
}

/// Ends drains whose pinned flows are gone or whose timeout passed; returns the
/// hosts to ask for their pinned flows.
fn check_drains(shared: &Shared, core: &mut Core) -> Vec<(u32, String)> {
    let now = Instant::now();
    for k in core.desired.draining.clone() {
        if !core.drains.contains_key(&k) {
            let timeout = core.drain_timeouts.remove(&k).unwrap_or(DRAIN_TIMEOUT);
            core.drains.insert(
                k,
                Drain {
                    started: now,
                    timeout,
                },
            );
        }
    }
    let draining = core.desired.draining.clone();
    core.drains.retain(|k, _| draining.contains(k));
    let mut finished = Vec::new();
    let mut polls = BTreeSet::new();
    for (k, d) in &core.drains {
        if now.duration_since(d.started) >= d.timeout {
            finished.push((
                k.clone(),
                format!(
                    "drain timeout of {} ms passed with flows possibly still pinned",
                    d.timeout.as_millis()
                ),
            ));
            continue;
        }
        let mut clear = true;
        for (h, vni, o) in drain_pairs(core, k) {
            let want = core.configs.get(&h).map_or(0, |c| c.version);
            let zero = match core.pinned.get(&h) {
                Some((v, flows, at)) if *v >= want && *at >= d.started => !flows
                    .iter()
                    .any(|f| f.vni == vni && f.target == o && f.flows > 0),
                _ => false,
            };
            if !zero {
                clear = false;
                polls.insert(h);
            }
        }
        if clear {
            finished.push((k.clone(), "no flow is pinned to it any more".to_string()));
        }
    }
    if !finished.is_empty() {
        let mut next = core.desired.clone();
        for (k, _) in &finished {
            next.finish_drain(k);
        }
        match shared.commit(core, next) {
            Ok(_) => {
                for (k, why) in finished {
                    core.drains.remove(&k);
                    core.down_reason.remove(&k);
                    let name = instance_name(&k.0, &k.1, k.2);
                    let mut e = event("drain", format!("{name} removed after draining: {why}"));
                    e.tenant = Some(k.0.clone());
                    e.middlebox = Some(k.1.clone());
                    e.instance = Some(name);
                    core.events.push(e);
                }
            }
            Err(e) => {
                core.events
                    .push(event("error", format!("drain end not applied: {}", e.msg)));
            }
        }
    }
    polls
        .into_iter()
        .filter_map(|h| core.desired.hosts.get(&h).map(|x| (h, x.api.clone())))
        .collect()
}

fn middlebox_info(d: &Desired, tenant: &str, mb: &str) -> Result<MiddleboxInfo, ApiError> {
    let t = d
        .tenants
        .get(tenant)
        .ok_or_else(|| ApiError::not_found(format!("tenant `{tenant}` is not applied")))?;
    let (spec_instances, pipeline) = match t.spec.elements.get(mb) {
        Some(sluice_tenant::Element::Middlebox {
            instances,
            pipeline,
            ..
        }) => (*instances, *pipeline),
        _ => {
            return Err(ApiError::not_found(format!(
                "tenant `{tenant}` has no middlebox `{mb}`"
            )))
        }
    };
    let names = |set: &BTreeSet<InstanceKey>| {
        set.iter()
            .filter(|k| k.0 == tenant && k.1 == mb)
            .map(|k| instance_name(&k.0, &k.1, k.2))
            .collect::<Vec<_>>()
    };
    Ok(MiddleboxInfo {
        tenant: tenant.to_string(),
        middlebox: mb.to_string(),
        instances: d.count(tenant, mb).unwrap_or(spec_instances),
        spec_instances,
        scaled: d.scaled.contains_key(&(tenant.to_string(), mb.to_string())),
        state: if d.local_state(tenant, mb) {
            "local"
        } else if d.cached_state(tenant, mb) {
            "cached"
        } else {
            "shared"
        }
        .into(),
        affinity: if d.pinned(tenant, mb) {
            "pinned"
        } else {
            "hash"
        }
        .into(),
        pipeline,
        placed: instance_infos(d, Some(tenant))
            .into_iter()
            .filter(|i| i.middlebox == mb)
            .collect(),
        draining: names(&d.draining),
        down: names(&d.down),
        pushed: BTreeMap::new(),
    })
}

fn get_middlebox(shared: &Shared, tenant: &str, mb: &str) -> Result<Reply, ApiError> {
    let core = lock(&shared.core);
    json(200, &middlebox_info(&core.desired, tenant, mb)?)
}

fn put_middlebox(shared: &Shared, tenant: &str, mb: &str, body: &str) -> Result<Reply, ApiError> {
    let req: ScaleRequest =
        serde_json::from_str(body).map_err(|e| ApiError::bad(format!("body: {e}")))?;
    let mut core = lock(&shared.core);
    let before = core.desired.count(tenant, mb);
    let pushed = scale_to(
        shared,
        &mut core,
        tenant,
        mb,
        req.instances,
        req.drain_timeout_ms,
    )?;
    let after = core.desired.count(tenant, mb);
    let mut e = event(
        "scale",
        format!(
            "{tenant}/{mb}: {} -> {} instances (scale API)",
            before.unwrap_or(0),
            after.unwrap_or(0)
        ),
    );
    e.tenant = Some(tenant.to_string());
    e.middlebox = Some(mb.to_string());
    core.events.push(e);
    let mut info = middlebox_info(&core.desired, tenant, mb)?;
    info.pushed = pushed;
    json(200, &info)
}

/// Sets a middlebox's count and commits; logs the drains it starts.
fn scale_to(
    shared: &Shared,
    core: &mut Core,
    tenant: &str,
    mb: &str,
    n: u64,
    drain_timeout_ms: Option<u64>,
) -> Result<BTreeMap<u32, u64>, ApiError> {
    let mut next = core.desired.clone();
    next.scale(tenant, mb, n)?;
    let started: Vec<InstanceKey> = next
        .draining
        .difference(&core.desired.draining)
        .cloned()
        .collect();
    let pushed = shared.commit(core, next)?;
    for k in started {
        if let Some(ms) = drain_timeout_ms {
            core.drain_timeouts
                .insert(k.clone(), Duration::from_millis(ms));
        }
        let name = instance_name(&k.0, &k.1, k.2);
        let mut e = event(
            "drain",
            format!("{name} draining: no new flows; removed once no flow is pinned to it"),
        );
        e.tenant = Some(k.0.clone());
        e.middlebox = Some(k.1.clone());
        e.instance = Some(name);
        core.events.push(e);
    }
    Ok(pushed)
}

fn chain_middleboxes(d: &Desired, tenant: &str, chain: &str) -> Result<Vec<String>, ApiError> {
    let t = d
        .tenants
        .get(tenant)
        .ok_or_else(|| ApiError::not_found(format!("tenant `{tenant}` is not applied")))?;
    let c = t
        .spec
        .chains
        .iter()
        .find(|c| c.name == chain)
        .ok_or_else(|| ApiError::not_found(format!("tenant `{tenant}` has no chain `{chain}`")))?;
    Ok(c.middleboxes(&t.spec).map(str::to_string).collect())
}

fn counts_of(d: &Desired, tenant: &str, mbs: &[String]) -> BTreeMap<String, u32> {
    mbs.iter()
        .map(|m| (m.clone(), d.count(tenant, m).unwrap_or(0)))
        .collect()
}

/// The chain's scaler, (re)built if the chain's middleboxes or their counts
/// changed outside it; None if no scaler is configured.
fn scaler_of<'a>(
    core: &'a mut Core,
    tenant: &str,
    chain: &str,
) -> Result<Option<&'a mut ChainScaler>, ApiError> {
    let key = (tenant.to_string(), chain.to_string());
    let mbs = chain_middleboxes(&core.desired, tenant, chain)?;
    let Some(cfg) = core.desired.scaling.get(&key).cloned() else {
        core.scalers.remove(&key);
        return Ok(None);
    };
    let counts = counts_of(&core.desired, tenant, &mbs);
    let rebuild = core
        .scalers
        .get(&key)
        .is_none_or(|s| s.middleboxes != mbs || s.scaler.counts() != &counts);
    if rebuild {
        let config = cfg.to_config().map_err(ApiError::bad)?;
        let list: Vec<(String, u32)> = mbs.iter().map(|m| (m.clone(), counts[m])).collect();
        let scaler = Scaler::new(config, &list)
            .map_err(|e| ApiError::conflict(format!("scaler of {tenant}/{chain}: {e}")))?;
        let old = core.scalers.remove(&key);
        if old.is_some() {
            let mut e = event(
                "scaler",
                format!(
                    "scaler of {tenant}/{chain} restarted: instance counts {counts:?} changed outside it"
                ),
            );
            e.tenant = Some(tenant.to_string());
            e.chain = Some(chain.to_string());
            core.events.push(e);
        }
        core.scalers.insert(
            key.clone(),
            ChainScaler {
                scaler,
                middleboxes: mbs,
                seen: 0,
                last_ns: old.map_or(0, |o| o.last_ns),
            },
        );
    }
    Ok(core.scalers.get_mut(&key))
}

/// Copies the scaler's new log lines to the event log and carries out its
/// decisions (one commit).
fn run_decisions(
    shared: &Shared,
    core: &mut Core,
    tenant: &str,
    chain: &str,
    decisions: &[Decision],
) -> Vec<String> {
    let key = (tenant.to_string(), chain.to_string());
    let mut last_why = String::new();
    if let Some(cs) = core.scalers.get_mut(&key) {
        let new: Vec<sluice_scaling::Event> = cs.scaler.events()[cs.seen..].to_vec();
        cs.seen = cs.scaler.events().len();
        for se in new {
            last_why = se.what.clone();
            let mut e = event("scaler", se.what);
            e.tenant = Some(tenant.to_string());
            e.chain = Some(chain.to_string());
            e.counts = Some(se.counts);
            core.events.push(e);
        }
    }
    if decisions.is_empty() {
        return Vec::new();
    }
    let mut next = core.desired.clone();
    let mut done = Vec::new();
    for d in decisions {
        let (mb, up) = match d {
            Decision::Add(m) => (m, true),
            Decision::Remove(m) => (m, false),
        };
        let n = next.count(tenant, mb).unwrap_or(0) as u64;
        let n = if up { n + 1 } else { n.saturating_sub(1) };
        if let Err(e) = next.scale(tenant, mb, n) {
            core.events.push(event(
                "error",
                format!("scaler decision {d:?} for {tenant}/{chain} not carried out: {e}"),
            ));
            return Vec::new();
        }
        done.push((mb.clone(), up, n));
    }
    let started: Vec<InstanceKey> = next
        .draining
        .difference(&core.desired.draining)
        .cloned()
        .collect();
    match shared.commit(core, next) {
        Ok(_) => {
            for k in started {
                let name = instance_name(&k.0, &k.1, k.2);
                let mut e = event("drain", format!("{name} draining (scaler)"));
                e.tenant = Some(k.0.clone());
                e.middlebox = Some(k.1.clone());
                e.instance = Some(name);
                core.events.push(e);
            }
            let mut out = Vec::new();
            for (mb, up, n) in done {
                let what = format!("{} {mb}", if up { "add" } else { "remove" });
                let mut e = event(
                    "scale",
                    format!("{tenant}/{mb}: {what} -> {n} instances (scaler of chain {chain}: {last_why})"),
                );
                e.tenant = Some(tenant.to_string());
                e.chain = Some(chain.to_string());
                e.middlebox = Some(mb.clone());
                core.events.push(e);
                out.push(what);
            }
            out
        }
        Err(e) => {
            core.events.push(event(
                "error",
                format!(
                    "scaler decisions for {tenant}/{chain} not carried out: {}",
                    e.msg
                ),
            ));
            Vec::new()
        }
    }
}

fn scaling_ack(core: &Core, tenant: &str, chain: &str, decisions: Vec<String>) -> ScalingAck {
    let key = (tenant.to_string(), chain.to_string());
    let mbs = core
        .scalers
        .get(&key)
        .map(|s| s.middleboxes.clone())
        .or_else(|| chain_middleboxes(&core.desired, tenant, chain).ok())
        .unwrap_or_default();
    ScalingAck {
        tenant: tenant.to_string(),
        chain: chain.to_string(),
        decisions,
        counts: counts_of(&core.desired, tenant, &mbs),
        scaling: core.scalers.get(&key).is_some_and(|s| s.scaler.scaling()),
        enabled: core.desired.scaling.contains_key(&key),
    }
}

fn post_metric(shared: &Shared, tenant: &str, chain: &str, body: &str) -> Result<Reply, ApiError> {
    let m: MetricSample =
        serde_json::from_str(body).map_err(|e| ApiError::bad(format!("body: {e}")))?;
    if !m.value.is_finite() {
        return Err(ApiError::bad("value: must be a finite number"));
    }
    let clock = shared.started.elapsed().as_nanos() as u64;
    let mut core = lock(&shared.core);
    let key = (tenant.to_string(), chain.to_string());
    if let Some(c) = core.desired.scaling.get(&key) {
        if c.metric != "reported" {
            return Err(ApiError::conflict(format!(
                "the scaler of {tenant}/{chain} follows `{}`, which the agents measure; \
                 set `metric: reported` to feed it samples",
                c.metric
            )));
        }
    }
    let Some(cs) = scaler_of(&mut core, tenant, chain)? else {
        return json(200, &scaling_ack(&core, tenant, chain, Vec::new()));
    };
    let ns = m
        .at_ms
        .map_or(clock, |ms| ms.saturating_mul(1_000_000))
        .max(cs.last_ns);
    cs.last_ns = ns;
    let decisions = cs.scaler.observe(ns, m.value);
    let done = run_decisions(shared, &mut core, tenant, chain, &decisions);
    json(200, &scaling_ack(&core, tenant, chain, done))
}

fn scaling_info(core: &Core, tenant: &str, chain: &str) -> Result<ScalingInfo, ApiError> {
    let key = (tenant.to_string(), chain.to_string());
    let mbs = chain_middleboxes(&core.desired, tenant, chain)?;
    let config = core.desired.scaling.get(&key).cloned().ok_or_else(|| {
        ApiError::not_found(format!(
            "no scaler is configured for chain `{chain}` of tenant `{tenant}` (PUT one first)"
        ))
    })?;
    Ok(ScalingInfo {
        tenant: tenant.to_string(),
        chain: chain.to_string(),
        config,
        counts: counts_of(&core.desired, tenant, &mbs),
        middleboxes: mbs,
        scaling: core.scalers.get(&key).is_some_and(|s| s.scaler.scaling()),
        measured: core.samplers.get(&key).and_then(|s| s.latest.clone()),
    })
}

fn get_scaling(shared: &Shared, tenant: &str, chain: &str) -> Result<Reply, ApiError> {
    let core = lock(&shared.core);
    json(200, &scaling_info(&core, tenant, chain)?)
}

fn put_scaling(shared: &Shared, tenant: &str, chain: &str, body: &str) -> Result<Reply, ApiError> {
    let cfg: ScalingConfig = if body.trim().is_empty() {
        ScalingConfig::default()
    } else {
        serde_json::from_str(body).map_err(|e| ApiError::bad(format!("body: {e}")))?
    };
    let config = cfg.to_config().map_err(ApiError::bad)?;
    let mut core = lock(&shared.core);
    let mbs = chain_middleboxes(&core.desired, tenant, chain)?;
    let counts = counts_of(&core.desired, tenant, &mbs);
    let list: Vec<(String, u32)> = mbs.iter().map(|m| (m.clone(), counts[m])).collect();
    // Built once here so a bad configuration is refused now.
    let scaler = Scaler::new(config, &list).map_err(|e| ApiError::bad(e.to_string()))?;
    let key = (tenant.to_string(), chain.to_string());
    let mut next = core.desired.clone();
    next.scaling.insert(key.clone(), cfg.clone());
    shared.commit(&mut core, next)?;
    core.scalers.insert(
        key,
        ChainScaler {
            scaler,
            middleboxes: mbs.clone(),
            seen: 0,
            last_ns: 0,
        },
    );
    let mut e = event(
        "scaler",
        format!(
            "scaler of {tenant}/{chain} set: strategy {}, budget {}, middleboxes {mbs:?}",
            cfg.strategy, cfg.budget
        ),
    );
    e.tenant = Some(tenant.to_string());
    e.chain = Some(chain.to_string());
    e.counts = Some(counts);
    core.events.push(e);
    json(200, &scaling_info(&core, tenant, chain)?)
}

fn delete_scaling(shared: &Shared, tenant: &str, chain: &str) -> Result<Reply, ApiError> {
    let mut core = lock(&shared.core);
    chain_middleboxes(&core.desired, tenant, chain)?;
    let key = (tenant.to_string(), chain.to_string());
    let mut next = core.desired.clone();
    if next.scaling.remove(&key).is_none() {
        return Err(ApiError::not_found(format!(
            "no scaler is configured for chain `{chain}` of tenant `{tenant}`"
        )));
    }
    let pushed = shared.commit(&mut core, next)?;
    core.scalers.remove(&key);
    let mut e = event("scaler", format!("scaler of {tenant}/{chain} removed"));
    e.tenant = Some(tenant.to_string());
    e.chain = Some(chain.to_string());
    core.events.push(e);
    json(
        200,
        &Deleted {
            deleted: format!("scaler {tenant}/{chain}"),
            pushed,
        },
    )
}

fn scaling_request(
    shared: &Shared,
    tenant: &str,
    chain: &str,
    body: &str,
) -> Result<Reply, ApiError> {
    let r: ScalingRequest =
        serde_json::from_str(body).map_err(|e| ApiError::bad(format!("body: {e}")))?;
    let clock = shared.started.elapsed().as_nanos() as u64;
    let mut core = lock(&shared.core);
    let Some(cs) = scaler_of(&mut core, tenant, chain)? else {
        return Err(ApiError::not_found(format!(
            "no scaler is configured for chain `{chain}` of tenant `{tenant}` (PUT one first)"
        )));
    };
    // On the chain's own clock: the last sample's time if samples carry theirs.
    let ns = if cs.last_ns > clock {
        cs.last_ns
    } else {
        clock
    };
    cs.last_ns = ns;
    let reason = if r.reason.is_empty() {
        format!("requested ({})", if r.up { "up" } else { "down" })
    } else {
        r.reason
    };
    let decisions = cs.scaler.request(ns, r.up, &reason);
    let done = run_decisions(shared, &mut core, tenant, chain, &decisions);
    json(200, &scaling_ack(&core, tenant, chain, done))
}

fn list_events(shared: &Shared, url: &str) -> Result<Reply, ApiError> {
    let mut since = 0u64;
    let mut kind = None;
    if let Some(q) = url.split_once('?').map(|x| x.1) {
        for kv in q.split('&') {
            match kv.split_once('=') {
                Some(("since", v)) => {
                    since = v
                        .parse()
                        .map_err(|_| ApiError::bad(format!("since: `{v}` is not an event id")))?
                }
                Some(("kind", v)) => kind = Some(percent_decode(v)),
                _ => {}
            }
        }
    }
    let core = lock(&shared.core);
    let v: Vec<&EventInfo> = core
        .events
        .ring
        .iter()
        .filter(|e| e.id > since && kind.as_ref().is_none_or(|k| *k == e.kind))
        .collect();
    json(200, &v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_catching_up_instance_is_done_near_its_share() {
        assert!(caught_up(0, 0, 2), "no flows: nothing to catch up");
        assert!(!caught_up(10, 50, 2));
        assert!(caught_up(38, 78, 2));
        assert!(caught_up(30, 90, 3) && !caught_up(26, 90, 3));
    }

    #[test]
    fn routes_match_templates_and_methods() {
        assert_eq!(
            route("GET", "/v1/hosts/3/fib"),
            Ok(("/v1/hosts/{id}/fib", vec!["3".to_string()]))
        );
        assert_eq!(
            route("PUT", "/v1/vms/acme/web%2Da1"),
            Ok((
                "/v1/vms/{tenant}/{name}",
                vec!["acme".to_string(), "web-a1".to_string()]
            ))
        );
        assert_eq!(route("PATCH", "/v1/tenants/x").unwrap_err().status, 405);
        assert_eq!(route("GET", "/v1/nothing").unwrap_err().status, 404);
        assert_eq!(route("GET", "/v1/tenants/").unwrap().0, "/v1/tenants");
    }
}
