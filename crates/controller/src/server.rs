//! The REST API (tiny_http, a small pool of threads) and the pusher that sends
//! each host's configuration to its agent.
//!
//! Every mutating request works on a copy of the desired state: place, compile
//! every tenant, derive every host's configuration; only if all of that succeeds
//! is the copy persisted (one transaction) and swapped in, and the hosts whose
//! configuration changed get a new version and a push. API calls never wait for
//! agents: a background pusher sends configurations, retries failures with
//! backoff, and re-pushes when a heartbeat shows an agent running another version.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;
use sluice_proto::{AgentConfig, AgentStatus, HostRegistration, VmRegistration};
use sluice_tenant::TenantSpec;

use crate::api::*;
use crate::db::{Db, DbError};
use crate::place::{instance_name, versioned, Desired, Host, PlaceError};

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
];

/// A host is alive if heard from within this long.
const ALIVE: Duration = Duration::from_secs(1);
/// A heartbeat with a stale version re-pushes at most this often.
const REPUSH_AFTER: Duration = Duration::from_secs(1);
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
}

struct Core {
    desired: Desired,
    configs: BTreeMap<u32, AgentConfig>,
    db: Db,
    live: BTreeMap<u32, Live>,
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
        }),
        queue: Mutex::new(PushQueue::default()),
        push_cv: Condvar::new(),
        pushers: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
        state_url: opts.state_url,
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
        _ => Err(ApiError::not_found(format!("no such endpoint: {path}"))),
    }
}

impl Shared {
    /// Makes `next` the desired state if every host's configuration can be
    /// derived from it: persists it, bumps versions of changed hosts and schedules
    /// their pushes. Returns the changed hosts and their new versions.
    fn commit(&self, core: &mut Core, next: Desired) -> Result<BTreeMap<u32, u64>, ApiError> {
        let mut cfgs = next.configs(&self.state_url)?;
        let changed = versioned(&core.configs, &mut cfgs);
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
        .map(|((t, mb, k), i)| InstanceInfo {
            name: instance_name(t, mb, *k),
            tenant: t.clone(),
            middlebox: mb.clone(),
            host: i.host,
            port: i.port,
            state: "placed".into(),
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
    let reg: HostRegistration =
        serde_json::from_str(body).map_err(|e| ApiError::bad(format!("body: {e}")))?;
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
    let live = core.live.entry(reg.host).or_default();
    live.last_heard = Some(now);
    live.reported = Some(reg.config_version);
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

#[cfg(test)]
mod tests {
    use super::*;

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
