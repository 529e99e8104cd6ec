//! The controller's REST API end to end on loopback: fake agents (tiny_http
//! servers recording what is pushed to them) register, VMs are registered, the
//! Figure 4 tenant is applied, bad specs are refused without touching any host,
//! the controller restarts on its database and carries on, and a stale heartbeat
//! brings a re-push.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sluice_controller::client::{Client, ClientError};
use sluice_controller::{serve, ServerHandle, ServerOptions};
use sluice_proto::{AgentConfig, AgentStatus, HostRegistration, InstanceStatus, VmRegistration};
use sluice_switch::{Fib, GroupId};
use sluice_tenant::{Element, TenantSpec};

/// An agent that accepts (and records) every configuration whose FIBs install.
struct FakeAgent {
    host: u32,
    url: String,
    configs: Arc<Mutex<Vec<AgentConfig>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

fn installs(c: &AgentConfig) -> Result<(), String> {
    for t in &c.tenants {
        let groups = t
            .groups
            .iter()
            .map(|(g, v)| (GroupId(*g), v.clone()))
            .collect();
        Fib::new()
            .replace(t.entries.clone(), groups, c.version)
            .map_err(|e| format!("tenant {}: {e}", t.tenant))?;
    }
    Ok(())
}

impl FakeAgent {
    fn start(host: u32) -> FakeAgent {
        let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
        let url = format!("http://{}", server.server_addr().to_ip().unwrap());
        let configs: Arc<Mutex<Vec<AgentConfig>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s) = (configs.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let Ok(Some(mut req)) = server.recv_timeout(Duration::from_millis(50)) else {
                    continue;
                };
                let mut body = String::new();
                let _ = req.as_reader().read_to_string(&mut body);
                // The agent's own API token (what a real agent draws at start
                // and registers with): a push without it is refused.
                let authorized = req.headers().iter().any(|h| {
                    h.field.equiv("Authorization")
                        && h.value.as_str() == format!("Bearer agent-secret-{host}")
                });
                let (code, text) = match (req.method().as_str(), req.url()) {
                    ("PUT", "/v1/config") if !authorized => (401, "{}".to_string()),
                    ("PUT", "/v1/config") => match serde_json::from_str::<AgentConfig>(&body) {
                        Ok(cfg) => match installs(&cfg) {
                            Ok(()) => {
                                c.lock().unwrap().push(cfg);
                                (200, "{}".to_string())
                            }
                            Err(e) => (400, serde_json::json!({ "error": e }).to_string()),
                        },
                        Err(e) => (
                            400,
                            serde_json::json!({ "error": e.to_string() }).to_string(),
                        ),
                    },
                    ("GET", "/v1/status") => {
                        let last = c.lock().unwrap().last().cloned().unwrap_or_default();
                        let st = AgentStatus {
                            host,
                            config_version: last.version,
                            instances: last
                                .instances
                                .iter()
                                .map(|i| InstanceStatus {
                                    name: i.name.clone(),
                                    port: i.port,
                                    pid: Some(10_000 + i.port as u32),
                                    alive: true,
                                })
                                .collect(),
                            ..AgentStatus::default()
                        };
                        (200, serde_json::to_string(&st).unwrap())
                    }
                    _ => (404, "{}".into()),
                };
                let _ = req.respond(tiny_http::Response::from_string(text).with_status_code(code));
            }
        });
        FakeAgent {
            host,
            url,
            configs,
            stop,
            thread: Some(thread),
        }
    }

    fn registration(&self, version: u64) -> HostRegistration {
        HostRegistration {
            host: self.host,
            name: format!("h{}", self.host),
            underlay: Ipv4Addr::new(10, 255, 0, self.host as u8),
            api: self.url.clone(),
            config_version: version,
            api_token: Some(format!("agent-secret-{}", self.host)),
            capacity: None,
            api_csr: None,
        }
    }

    fn pushes(&self) -> usize {
        self.configs.lock().unwrap().len()
    }

    fn last(&self) -> Option<AgentConfig> {
        self.configs.lock().unwrap().last().cloned()
    }
}

impl Drop for FakeAgent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn start(db: &Path) -> (ServerHandle, Client) {
    // Next to a file database (a restart finds the first start's token); a
    // private file for `:memory:`.
    let token_file = (db.as_os_str() == ":memory:").then(|| {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        std::env::temp_dir().join(format!(
            "sluice-test-{}-{n}.admin-token",
            std::process::id()
        ))
    });
    let h = serve(ServerOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        db: db.to_path_buf(),
        state_url: "redis://127.0.0.1:6379".into(),
        admin_token_file: token_file.clone(),
        fabric_auth: true,
        tls: None,
        placement: Default::default(),
        distribution: Default::default(),
        containment_threshold: sluice_controller::reconcile::DEFAULT_THRESHOLD,
        require_agent_tls: false,
        etcd: None,
    })
    .unwrap();
    let file =
        token_file.unwrap_or_else(|| sluice_controller::service::default_admin_token_file(db));
    let secret = std::fs::read_to_string(&file).unwrap();
    if db.as_os_str() == ":memory:" {
        let _ = std::fs::remove_file(&file);
    }
    let c = Client::new(&h.url()).with_token(Some(&secret));
    (h, c)
}

fn figure4_path() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/tenant/figure4.yaml"
    ))
}

fn figure4() -> (String, TenantSpec) {
    let text = std::fs::read_to_string(figure4_path()).unwrap();
    let spec = TenantSpec::parse(&text, "f4", None).unwrap();
    (text, spec)
}

/// Polls `f` until it holds (a safety net, not a timing assertion).
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn vm(name: &str, host: u32, addr: &str, gateway: bool) -> VmRegistration {
    VmRegistration {
        tenant: "acme".into(),
        name: name.into(),
        host,
        iface: format!("v-{name}"),
        mac: "02:00:00:00:00:07".into(),
        addr: addr.parse().unwrap(),
        gateway,
    }
}

const FIGURE4_VMS: [(&str, u32, &str, bool); 5] = [
    ("gateway", 1, "198.51.100.10", true),
    ("web-a1", 2, "10.10.1.11", false),
    ("web-a2", 3, "10.10.1.12", false),
    ("web-b1", 1, "10.10.2.11", false),
    ("web-b2", 2, "10.10.2.12", false),
];

/// Heartbeats every agent with what it last received, until the controller sees
/// every host in sync.
fn sync(c: &Client, agents: &[FakeAgent]) {
    eventually("every host in sync", || {
        for a in agents {
            let v = a.last().map(|c| c.version).unwrap_or(0);
            c.register_host(&a.registration(v)).unwrap();
        }
        let hosts = c.hosts().unwrap();
        hosts.len() == agents.len()
            && hosts.iter().all(|h| h.in_sync && h.desired_version > 0)
            && agents.iter().all(|a| {
                let d = hosts
                    .iter()
                    .find(|h| h.id == a.host)
                    .unwrap()
                    .desired_version;
                a.last().is_some_and(|c| c.version == d)
            })
    });
}

fn versions(c: &Client) -> BTreeMap<u32, u64> {
    c.hosts()
        .unwrap()
        .into_iter()
        .map(|h| (h.id, h.desired_version))
        .collect()
}

fn api_err(r: Result<impl std::fmt::Debug, ClientError>) -> (u16, String) {
    match r {
        Err(ClientError::Api { status, message }) => (status, message),
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[test]
fn figure4_applies_refuses_bad_specs_survives_restart_and_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("controller.db");
    let agents: Vec<FakeAgent> = (1..=3).map(FakeAgent::start).collect();
    let (text, spec) = figure4();

    let (server, c) = start(&db);
    for a in &agents {
        let ack = c.register_host(&a.registration(0)).unwrap();
        assert_eq!(ack.host, a.host);
    }
    sync(&c, &agents);
    let before = versions(&c);
    for (n, h, addr, gw) in FIGURE4_VMS {
        let v = c.register_vm(&vm(n, h, addr, gw)).unwrap();
        assert_eq!((v.host, v.applied), (h, false));
    }
    // VMs of an unapplied tenant change no host.
    assert_eq!(versions(&c), before);

    let s = c.apply(Some("acme"), &text).unwrap();
    assert!(s.changed);
    assert_eq!(s.chains, vec!["east-to-a", "west-to-a", "west-to-b"]);
    let want_instances: u32 = spec
        .elements
        .values()
        .map(|e| match e {
            Element::Middlebox { instances, .. } => *instances,
            _ => 0,
        })
        .sum();
    assert_eq!(s.instances.len(), want_instances as usize);
    assert_eq!(s.entries.len(), 3);
    assert!(s.entries.values().all(|&n| n > 0));
    for (h, v) in &s.pushed {
        assert!(*v > before[h]);
    }
    sync(&c, &agents);
    let mut pushed_instances = 0;
    for a in &agents {
        let cfg = a.last().unwrap();
        installs(&cfg).unwrap();
        assert_eq!(cfg.peers.len(), 3);
        assert_eq!(cfg.tenants.len(), 1);
        assert_eq!(cfg.tenants[0].vni, s.vni);
        pushed_instances += cfg.instances.len();
        for i in &cfg.instances {
            assert!(i
                .chain_yaml
                .contains(&format!("name: acme.{}", i.middlebox)));
            assert_eq!(i.state, "redis://127.0.0.1:6379");
        }
    }
    assert_eq!(pushed_instances, want_instances as usize);

    // Each agent got its links' keys (sealing is on); the API shows which
    // peers and key ids, never a key.
    for a in &agents {
        let keys = a.last().unwrap().fabric_auth.unwrap();
        assert_eq!(keys.peers.len(), 2);
        assert_eq!(keys.peers[0].tx.key.len(), 64);
        let shown = c.config(a.host).unwrap().fabric_auth.unwrap();
        assert_eq!(shown.peers.len(), 2);
        let text = serde_json::to_string(&shown).unwrap();
        assert!(!text.contains(&keys.peers[0].tx.key), "{text}");
        assert!(shown.peers.iter().all(|p| p.tx.key == "redacted"));
    }

    // The same spec again: nothing changes.
    let v1 = versions(&c);
    let again = c.apply(Some("acme"), &text).unwrap();
    assert!(!again.changed);
    assert!(again.pushed.is_empty());
    assert_eq!(versions(&c), v1);

    // Bad specs: refused with the field named; no host gets a new version.
    let pushes: Vec<usize> = agents.iter().map(FakeAgent::pushes).collect();
    let unknown = text.replace("type: external", "type: extrnal");
    let (code, msg) = api_err(c.apply(Some("acme"), &unknown));
    assert_eq!(code, 400);
    assert!(msg.contains("unknown element type `extrnal`"), "{msg}");
    assert!(msg.contains("elements.clients-east.type"), "{msg}");
    let dangling = text.replace(
        "[clients-west, http, fw, lb-b, web-b]",
        "[clients-west, http, fw2, lb-b, web-b]",
    );
    let (code, msg) = api_err(c.apply(Some("acme"), &dangling));
    assert_eq!(code, 400);
    assert!(
        msg.contains("chains[2].path[2]") && msg.contains("fw2"),
        "{msg}"
    );
    let (code, msg) = api_err(c.apply(Some("other"), &text));
    assert_eq!(code, 400);
    assert!(msg.contains("tenant"), "{msg}");
    // A second tenant whose VMs are not registered: a conflict, nothing changes.
    let other = text.replace("tenant: acme", "tenant: beta");
    let (code, msg) = api_err(c.apply(None, &other));
    assert_eq!(code, 409);
    assert!(msg.contains("web-a1") && msg.contains("beta"), "{msg}");
    // A VM the tenant needs cannot go.
    let (code, msg) = api_err(c.delete_vm("acme", "web-a1"));
    assert_eq!(code, 409);
    assert!(msg.contains("web-a1"), "{msg}");
    assert_eq!(versions(&c), v1);
    assert_eq!(c.tenants().unwrap().len(), 1);
    let after: Vec<usize> = agents.iter().map(FakeAgent::pushes).collect();
    assert_eq!(after, pushes);

    // The read side.
    let t = c.tenant("acme").unwrap();
    assert_eq!(
        (t.vni, t.generation, t.spec.as_str()),
        (s.vni, 1, text.as_str())
    );
    assert_eq!(t.vms.len(), 5);
    assert_eq!(c.vms().unwrap().iter().filter(|v| v.applied).count(), 5);
    let chains = c.chains().unwrap();
    assert_eq!(chains.len(), 3);
    assert_eq!(chains[0].mirror, vec!["mon"]);
    assert_eq!((chains[1].id, chains[1].reverse_id), (2, Some(3)));
    let inst = c.instances().unwrap();
    assert_eq!(inst.len(), want_instances as usize);
    assert!(
        inst.iter()
            .all(|i| i.state == "alive" && i.alive == Some(true) && i.pid.is_some()),
        "{inst:?}"
    );
    let fib = c.fib(2).unwrap();
    assert_eq!(fib.tenants[0].entries.len(), s.entries[&2]);
    let mut pushed = agents[0].last().unwrap();
    pushed.fabric_auth = pushed.fabric_auth.map(|f| f.redacted());
    assert!(
        c.config(1).unwrap() == pushed,
        "GET config = what was pushed, keys redacted"
    );
    assert_eq!(api_err(c.fib(9)).0, 404);
    assert_eq!(api_err(c.tenant("nobody")).0, 404);
    let doc = c.get_raw("/v1/openapi.yaml").unwrap();
    assert!(doc.starts_with("openapi:"));
    // The state URL names a store: `/healthz` is 503 naming it unless
    // something answers there.
    match std::net::TcpStream::connect("127.0.0.1:6379") {
        Ok(_) => assert!(c.get_raw("/healthz").unwrap().contains("ok")),
        Err(_) => match c.get_raw("/healthz") {
            Err(sluice_controller::client::ClientError::Api { status, message }) => {
                assert_eq!(status, 503, "{message}");
                assert!(message.contains("127.0.0.1:6379"), "{message}");
            }
            other => panic!("/healthz with no store: {other:?}"),
        },
    }

    // Restart on the same database: same tenants and placements, same versions.
    let placed = s.instances.clone();
    server.shutdown();
    let (server, c) = start(&db);
    assert_eq!(versions(&c), v1);
    let t2 = c.tenant("acme").unwrap();
    assert_eq!((t2.vni, t2.generation), (s.vni, 1));
    assert_eq!(t2.instances, placed);
    assert_eq!(c.vms().unwrap().len(), 5);
    assert_eq!(c.chains().unwrap().len(), 3);
    sync(&c, &agents);
    assert_eq!(versions(&c), v1);

    // Delete: the tenant's entries, ports and instances go; versions go up.
    let d = c.delete_tenant("acme").unwrap();
    assert_eq!(d.pushed.len(), 3);
    sync(&c, &agents);
    for a in &agents {
        let cfg = a.last().unwrap();
        assert!(cfg.version > v1[&a.host]);
        assert!(cfg.tenants.is_empty() && cfg.instances.is_empty() && cfg.ports.is_empty());
        assert!(c.fib(a.host).unwrap().tenants.is_empty());
    }
    assert!(c.tenants().unwrap().is_empty());
    assert!(c.instances().unwrap().is_empty());
    assert_eq!(api_err(c.delete_tenant("acme")).0, 404);
    // Applying again gives the tenant a new VNI.
    let s2 = c.apply(None, &text).unwrap();
    assert!(s2.vni > s.vni);
    server.shutdown();
}

#[test]
fn a_stale_heartbeat_brings_a_repush() {
    let agent = FakeAgent::start(1);
    let (server, c) = start(Path::new(":memory:"));
    c.register_host(&agent.registration(0)).unwrap();
    sync(&c, std::slice::from_ref(&agent));
    let n = agent.pushes();
    let v = agent.last().unwrap().version;
    // The agent restarted and lost its configuration: it reports version 0.
    eventually("a re-push after a stale heartbeat", || {
        c.register_host(&agent.registration(0)).unwrap();
        agent.pushes() > n
    });
    assert_eq!(agent.last().unwrap().version, v);
    // An agent ahead of the controller (a lost database) is moved past.
    c.register_host(&agent.registration(v + 10)).unwrap();
    eventually("a push beyond the agent's version", || {
        agent.last().unwrap().version > v + 10
    });
    server.shutdown();
}

#[test]
fn bad_requests_name_the_field() {
    let (server, c) = start(Path::new(":memory:"));
    let (text, _) = figure4();
    // Nowhere to place instances.
    for (n, h, addr, gw) in FIGURE4_VMS {
        c.register_vm(&vm(n, h, addr, gw)).unwrap();
    }
    let (code, msg) = api_err(c.apply(Some("acme"), &text));
    assert_eq!(code, 409);
    assert!(msg.contains("no host"), "{msg}");
    assert!(c.tenants().unwrap().is_empty());
    // A second gateway.
    let (code, msg) = api_err(c.register_vm(&vm("gw2", 1, "198.51.100.11", true)));
    assert_eq!(code, 409);
    assert!(msg.contains("gateway"), "{msg}");
    // Malformed registrations.
    let mut r = vm("x", 1, "10.0.0.1", false);
    r.host = 0;
    let (code, msg) = api_err(c.register_vm(&r));
    assert_eq!(code, 400);
    assert!(msg.starts_with("host"), "{msg}");
    let bearer = format!("Bearer {}", c.token().unwrap());
    let bad = ureq::put(&format!("{}/v1/vms/acme/x", c.base()))
        .set("Authorization", &bearer)
        .set("Content-Type", "application/json")
        .send_string("{\"tenant\": \"acme\"}");
    match bad {
        Err(ureq::Error::Status(400, r)) => {
            let t = r.into_string().unwrap();
            assert!(
                t.contains("\"error\"") && t.contains("missing field"),
                "{t}"
            );
        }
        other => panic!("{other:?}"),
    }
    let wrong_type = ureq::put(&format!("{}/v1/tenants/acme", c.base()))
        .set("Authorization", &bearer)
        .set("Content-Type", "image/png")
        .send_string(&text);
    assert!(matches!(wrong_type, Err(ureq::Error::Status(400, _))));
    assert_eq!(api_err(c.get_raw("/v1/nothing")).0, 404);
    server.shutdown();
}

/// A client given several controllers' URLs (replicated controllers, of
/// which only the leader listens) passes over those that refuse the
/// connection, and keeps using the one that answered; with every one
/// refusing it says which it tried.
#[test]
fn a_client_of_several_controllers_uses_the_one_that_listens() {
    let (h, live) = start(Path::new(":memory:"));
    let admin = live.token().unwrap().to_string();
    let dead = || {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let (d1, d2) = (dead(), dead());
    let c = Client::new(&format!("{d1}, {},{d2}", h.url())).with_token(Some(&admin));
    assert!(c.tenants().unwrap().is_empty());
    assert_eq!(c.base(), h.url(), "the live one is used from now on");
    assert!(c.hosts().unwrap().is_empty());
    drop(h);
    let alone = Client::new(&d1).with_token(Some(&admin));
    let e = alone.tenants().unwrap_err().to_string();
    assert!(e.contains(&d1), "{e}");
}
