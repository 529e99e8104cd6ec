//! Health-driven failover, scaling, drains and catch-ups end to end on loopback
//! with fake agents (tiny_http servers recording pushes and reporting pinned
//! flows): the threads, the pusher, the polls and SQLite around the reconciler.
//! Every rule's timing is tested on a simulated clock in
//! `src/reconcile/tests.rs`; these check that the running controller carries
//! the reconciler's decisions out: an instance reported dead leaves every
//! host's groups and rejoins when alive; a silent host's instances leave; scale
//! out and in place instances and re-split groups, and survive a controller
//! restart; a local-state middlebox's groups are pinned and a removed instance
//! drains first; a new pinned instance catches up.

use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sluice_controller::client::Client;
use sluice_controller::model::ScaleRequest;
use sluice_controller::{serve, ServerHandle, ServerOptions};
use sluice_proto::{
    AgentConfig, AgentStatus, HostHeartbeat, HostRegistration, InstanceHealth, PinnedFlows,
    VmRegistration,
};
use sluice_switch::{HostId, Output, PortId};

/// An agent that accepts every configuration and reports the pinned flows the
/// test sets.
struct FakeAgent {
    host: u32,
    url: String,
    configs: Arc<Mutex<Vec<AgentConfig>>>,
    pinned: Arc<Mutex<Vec<PinnedFlows>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FakeAgent {
    fn start(host: u32) -> FakeAgent {
        let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
        let url = format!("http://{}", server.server_addr().to_ip().unwrap());
        let configs: Arc<Mutex<Vec<AgentConfig>>> = Arc::default();
        let pinned: Arc<Mutex<Vec<PinnedFlows>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (c, p, s) = (configs.clone(), pinned.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let Ok(Some(mut req)) = server.recv_timeout(Duration::from_millis(50)) else {
                    continue;
                };
                let mut body = String::new();
                let _ = req.as_reader().read_to_string(&mut body);
                let (code, text) = match (req.method().as_str(), req.url()) {
                    ("PUT", "/v1/config") => match serde_json::from_str::<AgentConfig>(&body) {
                        Ok(cfg) => {
                            c.lock().unwrap().push(cfg);
                            (200, "{}".to_string())
                        }
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
                            pinned_flows: p.lock().unwrap().clone(),
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
            pinned,
            stop,
            thread: Some(thread),
        }
    }

    fn registration(&self) -> HostRegistration {
        HostRegistration {
            host: self.host,
            name: format!("h{}", self.host),
            underlay: Ipv4Addr::new(10, 255, 0, self.host as u8),
            api: self.url.clone(),
            config_version: self.configs.lock().unwrap().last().map_or(0, |c| c.version),
            api_token: None,
            capacity: None,
            api_csr: None,
        }
    }

    fn last_version(&self) -> u64 {
        self.configs.lock().unwrap().last().map_or(0, |c| c.version)
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

/// Heartbeats a host every 50 ms with the instance health the test sets.
struct Beater {
    health: Arc<Mutex<Vec<InstanceHealth>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Beater {
    fn start(c: &Client, reg: HostRegistration, health: Vec<InstanceHealth>) -> Beater {
        let health = Arc::new(Mutex::new(health));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, h, s) = (c.clone(), health.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let hb = HostHeartbeat {
                    registration: reg.clone(),
                    instances: h.lock().unwrap().clone(),
                    chains: Vec::new(),
                    accusations: Vec::new(),
                    backend_checks: Vec::new(),
                    peers: Vec::new(),
                };
                let _ = c.heartbeat(&hb);
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Beater {
            health,
            stop,
            thread: Some(thread),
        }
    }

    fn set(&self, health: Vec<InstanceHealth>) {
        *self.health.lock().unwrap() = health;
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Beater {
    fn drop(&mut self) {
        self.stop();
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
        fabric_auth: false,
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

/// Polls `f` until it holds (a safety net, not a timing assertion).
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

const SPEC: &str = "tenant: t
elements:
  a: { type: service, vms: { a1: 10.0.0.1 } }
  b: { type: service, vms: { b1: 10.0.0.2 } }
  ips: { type: middlebox, function: monitor, instances: 2 }
  re: { type: middlebox, function: monitor }
chains:
  - { name: ab, path: [a, ips, re, b] }
";

fn vm(name: &str, host: u32, addr: &str) -> VmRegistration {
    VmRegistration {
        tenant: "t".into(),
        name: name.into(),
        host,
        iface: format!("v-{name}"),
        mac: "02:00:00:00:00:07".into(),
        addr: addr.parse().unwrap(),
        gateway: false,
    }
}

/// Three hosts, the two VMs, and `spec` applied.
fn setup(c: &Client, agents: &[FakeAgent], spec: &str) {
    for a in agents {
        c.register_host(&a.registration()).unwrap();
    }
    c.register_vm(&vm("a1", 1, "10.0.0.1")).unwrap();
    c.register_vm(&vm("b1", 3, "10.0.0.2")).unwrap();
    c.apply(None, spec).unwrap();
}

/// `(host, port)` of an instance.
fn placed(c: &Client, name: &str) -> (u32, u16) {
    let i = c
        .instances()
        .unwrap()
        .into_iter()
        .find(|i| i.name == name)
        .unwrap_or_else(|| panic!("{name} is not placed"));
    (i.host, i.port)
}

/// Every group target of every host's desired configuration, as `(host it is
/// defined on, target)`.
fn group_targets(c: &Client, hosts: &[u32]) -> Vec<(u32, Output)> {
    let mut out = Vec::new();
    for &h in hosts {
        for t in c.config(h).unwrap().tenants {
            for (_, g) in t.groups {
                out.extend(g.ranges.iter().map(|r| (h, r.1)));
            }
        }
    }
    out
}

/// The target an instance on `(ih, port)` is as seen from host `on`.
fn target(on: u32, ih: u32, port: u16) -> Output {
    if on == ih {
        Output::Port(PortId(port))
    } else {
        Output::Host(HostId(ih))
    }
}

fn in_any_group(c: &Client, (ih, port): (u32, u16)) -> bool {
    group_targets(c, &[1, 2, 3])
        .iter()
        .any(|(h, o)| *o == target(*h, ih, port))
}

fn health(name: &str, port: u16, alive: bool, suspected: bool) -> InstanceHealth {
    InstanceHealth {
        name: name.into(),
        port,
        alive,
        suspected,
        last_heartbeat_age_ms: Some(if suspected { 120 } else { 5 }),
        ..InstanceHealth::default()
    }
}

#[test]
fn a_dead_instance_leaves_every_group_and_rejoins_when_alive() {
    let dir = tempfile::tempdir().unwrap();
    let agents: Vec<FakeAgent> = (1..=3).map(FakeAgent::start).collect();
    let (_srv, c) = start(&dir.path().join("c.db"));
    setup(&c, &agents, SPEC);
    let ips1 = placed(&c, "t/ips/1");
    assert_eq!(ips1.0, 2, "ips/1 goes to the second host");
    assert!(in_any_group(&c, ips1));
    let v2 = c.config(1).unwrap().version;

    // Not running yet and never heard from: still starting, left in.
    let mut starting = health("t/ips/1", ips1.1, false, false);
    starting.last_heartbeat_age_ms = None;
    let mut beat = Beater::start(&c, agents[1].registration(), vec![starting]);
    std::thread::sleep(Duration::from_millis(150));
    assert!(in_any_group(&c, ips1));
    // No event but the state store's (its URL names a store nobody runs).
    let ev = c.events(0).unwrap();
    assert!(ev.iter().all(|e| e.kind.starts_with("store_")), "{ev:?}");
    beat.set(vec![health("t/ips/1", ips1.1, false, false)]);
    eventually("ips/1 out of every group", || !in_any_group(&c, ips1));
    // It keeps its port and placement.
    assert_eq!(placed(&c, "t/ips/1"), ips1);
    let cfg1 = c.config(1).unwrap();
    assert!(cfg1.version > v2);
    // Host 1's group of ips now holds only its local instance.
    let ips0 = placed(&c, "t/ips/0");
    assert!(group_targets(&c, &[1]).contains(&(1, target(1, ips0.0, ips0.1))));
    eventually("host 1 runs the new version", || {
        agents[0].last_version() >= cfg1.version
    });
    let ev = c.events(0).unwrap();
    let f = ev
        .iter()
        .find(|e| e.kind == "failover" && e.instance.as_deref() == Some("t/ips/1"))
        .expect("failover event");
    assert!(f.reason.contains("dead"), "{}", f.reason);
    assert!(f.first_report_ms.is_some());
    eventually("the failover records its push", || {
        c.events(0)
            .unwrap()
            .iter()
            .any(|e| e.kind == "failover" && e.push_sent_ms.is_some())
    });
    assert!(c.middlebox("t", "ips").unwrap().down == vec!["t/ips/1".to_string()]);

    // Suspected (alive but silent) is out too; then healthy again: back.
    beat.set(vec![health("t/ips/1", ips1.1, true, true)]);
    std::thread::sleep(Duration::from_millis(150));
    assert!(!in_any_group(&c, ips1));
    beat.set(vec![health("t/ips/1", ips1.1, true, false)]);
    eventually("ips/1 back in the groups", || in_any_group(&c, ips1));
    let ev = c.events(0).unwrap();
    assert!(ev
        .iter()
        .any(|e| e.kind == "rejoin" && e.instance.as_deref() == Some("t/ips/1")));
    assert!(c.middlebox("t", "ips").unwrap().down.is_empty());

    // The host goes silent: its instances leave.
    beat.stop();
    eventually("a silent host's instances leave", || {
        !in_any_group(&c, ips1)
    });
    let ev = c.events(0).unwrap();
    let f = ev
        .iter()
        .rev()
        .find(|e| e.kind == "failover")
        .expect("failover event");
    assert!(f.reason.contains("silent"), "{}", f.reason);
    // Heard again (healthy): back.
    let _beat = Beater::start(
        &c,
        agents[1].registration(),
        vec![health("t/ips/1", ips1.1, true, false)],
    );
    eventually("back once heard", || in_any_group(&c, ips1));
}

/// The ranges of the group whose targets are exactly `want` (in any order).
fn group_with(c: &Client, h: u32, want: &[Output]) -> Option<Vec<(u64, Output)>> {
    c.config(h)
        .unwrap()
        .tenants
        .into_iter()
        .flat_map(|t| t.groups)
        .map(|(_, g)| g.ranges)
        .find(|r| r.len() == want.len() && want.iter().all(|o| r.iter().any(|x| x.1 == *o)))
}

#[test]
fn scale_out_and_in_places_resplits_and_persists() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let agents: Vec<FakeAgent> = (1..=3).map(FakeAgent::start).collect();
    let (srv, c) = start(&db);
    setup(&c, &agents, SPEC);
    // re/0 went to host 3 (ips took hosts 1 and 2).
    assert_eq!(placed(&c, "t/re/0").0, 3);
    let info = c
        .scale(
            "t",
            "re",
            &ScaleRequest {
                instances: 3,
                drain_timeout_ms: None,
            },
        )
        .unwrap();
    assert_eq!(
        (info.instances, info.spec_instances, info.scaled),
        (3, 1, true)
    );
    assert!(!info.pushed.is_empty());
    let re: Vec<(u32, u16)> = (0..3).map(|k| placed(&c, &format!("t/re/{k}"))).collect();
    // New instances on the least-loaded hosts (1 then 2), ports unique per host.
    assert_eq!(re[0].0, 3);
    assert_eq!(re[1].0, 1);
    assert_eq!(re[2].0, 2);
    for h in 1..=3u32 {
        let mut ports: Vec<u16> = c
            .instances()
            .unwrap()
            .iter()
            .filter(|i| i.host == h)
            .map(|i| i.port)
            .chain(
                c.vms()
                    .unwrap()
                    .iter()
                    .filter(|v| v.host == h)
                    .map(|v| v.port),
            )
            .collect();
        let n = ports.len();
        ports.sort();
        ports.dedup();
        assert_eq!(ports.len(), n, "duplicate port on host {h}");
    }
    // Host 1's group of re is split evenly three ways.
    let want: Vec<Output> = re.iter().map(|&(h, p)| target(1, h, p)).collect();
    let ranges = group_with(&c, 1, &want).expect("a three-way group of re on host 1");
    let third = (1u64 << 32) / 3;
    assert!(ranges[0].0.abs_diff(third) <= 1, "{ranges:?}");
    assert!(ranges[1].0.abs_diff(2 * third) <= 2, "{ranges:?}");

    // A restarted controller keeps the scaled count, placements and ports.
    srv.shutdown();
    let (srv, c) = start(&db);
    let info = c.middlebox("t", "re").unwrap();
    assert_eq!(info.instances, 3);
    for (k, hp) in re.iter().enumerate() {
        assert_eq!(placed(&c, &format!("t/re/{k}")), *hp);
    }
    // Re-applying the same spec keeps it.
    c.apply(None, SPEC).unwrap();
    assert_eq!(c.middlebox("t", "re").unwrap().instances, 3);

    // Scale in 3 -> 1: the newest go, ports freed; the group has one target.
    let info = c
        .scale(
            "t",
            "re",
            &ScaleRequest {
                instances: 1,
                drain_timeout_ms: None,
            },
        )
        .unwrap();
    assert_eq!(info.placed.len(), 1);
    assert_eq!(placed(&c, "t/re/0"), re[0]);
    assert!(info.draining.is_empty(), "shared state needs no drain");
    assert!(group_with(&c, 1, &[target(1, re[0].0, re[0].1)]).is_some());
    // (Its own host's groups name its port: no longer.)
    assert!(!group_targets(&c, &[re[1].0])
        .iter()
        .any(|(_, o)| *o == Output::Port(PortId(re[1].1))));
    // A spec changing re's own count wins over the scaled one.
    c.scale(
        "t",
        "re",
        &ScaleRequest {
            instances: 3,
            drain_timeout_ms: None,
        },
    )
    .unwrap();
    c.apply(
        None,
        &SPEC.replace("function: monitor }", "function: monitor, instances: 2 }"),
    )
    .unwrap();
    let info = c.middlebox("t", "re").unwrap();
    assert_eq!((info.instances, info.scaled), (2, false));
    // Bad requests are refused naming the problem.
    let e = c
        .scale(
            "t",
            "nope",
            &ScaleRequest {
                instances: 2,
                drain_timeout_ms: None,
            },
        )
        .unwrap_err();
    assert!(e.to_string().contains("no middlebox `nope`"), "{e}");
    let e = c
        .scale(
            "t",
            "re",
            &ScaleRequest {
                instances: 0,
                drain_timeout_ms: None,
            },
        )
        .unwrap_err();
    assert!(e.to_string().contains("instances"), "{e}");
    let ev = c.events(0).unwrap();
    assert!(ev
        .iter()
        .any(|e| e.kind == "scale" && e.reason.contains("1 -> 3")));
    drop(srv);
}

#[test]
fn local_state_groups_are_pinned_and_removed_instances_drain() {
    let dir = tempfile::tempdir().unwrap();
    let agents: Vec<FakeAgent> = (1..=3).map(FakeAgent::start).collect();
    let (_srv, c) = start(&dir.path().join("c.db"));
    let spec = SPEC.replace(
        "re: { type: middlebox, function: monitor }",
        "re: { type: middlebox, function: monitor, state: local }",
    );
    setup(&c, &agents, &spec);
    assert_eq!(c.middlebox("t", "re").unwrap().state, "local");
    let scale = |n: u64, timeout: Option<u64>| {
        c.scale(
            "t",
            "re",
            &ScaleRequest {
                instances: n,
                drain_timeout_ms: timeout,
            },
        )
        .unwrap()
    };
    scale(2, None);
    let re0 = placed(&c, "t/re/0");
    let re1 = placed(&c, "t/re/1");
    // Its instances keep state locally; every host's group of re is pinned.
    for h in 1..=3u32 {
        let cfg = c.config(h).unwrap();
        for i in &cfg.instances {
            let want = if i.middlebox == "re" {
                "local"
            } else {
                "redis://127.0.0.1:6379"
            };
            assert_eq!(i.state, want, "{}", i.name);
        }
    }
    let cfg1 = c.config(1).unwrap();
    let vni = cfg1.tenants[0].vni;
    assert!(
        cfg1.group_policies
            .iter()
            .any(|p| p.vni == vni && p.pinned && p.draining.is_empty()),
        "{:?}",
        cfg1.group_policies
    );
    // Only re's groups are pinned: ips's (shared state) are plain.
    assert_eq!(cfg1.group_policies.len(), 1, "{:?}", cfg1.group_policies);

    // Scale in: re/1 drains (no new flows, still placed) while flows are pinned.
    let t1 = target(1, re1.0, re1.1);
    let t_own = target(re1.0, re1.0, re1.1);
    let pinned = |host_flows: u64| {
        for a in &agents {
            let tg = target(a.host, re1.0, re1.1);
            *a.pinned.lock().unwrap() = vec![PinnedFlows {
                vni,
                group: 0,
                target: tg,
                flows: host_flows,
                draining: true,
            }];
        }
    };
    pinned(3);
    let info = scale(1, None);
    assert_eq!(info.draining, vec!["t/re/1".to_string()]);
    assert_eq!(info.placed.len(), 2);
    assert!(!group_targets(&c, &[re1.0])
        .iter()
        .any(|(_, o)| *o == Output::Port(PortId(re1.1))));
    assert!(group_with(&c, 1, &[target(1, re0.0, re0.1)]).is_some());
    let cfg1 = c.config(1).unwrap();
    assert!(cfg1.group_policies.iter().any(|p| p.draining == vec![t1]));
    let cfg_own = c.config(re1.0).unwrap();
    assert!(cfg_own
        .group_policies
        .iter()
        .any(|p| p.draining == vec![t_own]));
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(
        c.middlebox("t", "re").unwrap().draining,
        vec!["t/re/1".to_string()],
        "flows are still pinned"
    );
    // The flows end: it is removed.
    pinned(0);
    eventually("re/1 removed after its drain", || {
        c.middlebox("t", "re").unwrap().placed.len() == 1
    });
    assert_eq!(placed(&c, "t/re/0"), re0);
    assert!(c
        .config(1)
        .unwrap()
        .group_policies
        .iter()
        .all(|p| p.draining.is_empty()));
    let ev = c.events(0).unwrap();
    assert!(ev
        .iter()
        .any(|e| e.kind == "drain" && e.reason.contains("no flow is pinned")));

    // A drain that never empties ends at its timeout.
    scale(2, None);
    let re1 = placed(&c, "t/re/1");
    for a in &agents {
        *a.pinned.lock().unwrap() = vec![PinnedFlows {
            vni,
            group: 0,
            target: target(a.host, re1.0, re1.1),
            flows: 5,
            draining: true,
        }];
    }
    scale(1, Some(300));
    eventually("re/1 removed at the drain timeout", || {
        c.middlebox("t", "re").unwrap().placed.len() == 1
    });
    let ev = c.events(0).unwrap();
    assert!(ev
        .iter()
        .any(|e| e.kind == "drain" && e.reason.contains("timeout")));
}

/// Fraction of the hash space of the group holding `o` (as host `h` sees it).
fn share_on(c: &Client, h: u32, o: Output) -> f64 {
    let ranges = c
        .config(h)
        .unwrap()
        .tenants
        .into_iter()
        .flat_map(|t| t.groups)
        .map(|(_, g)| g.ranges)
        .find(|r| r.iter().any(|x| x.1 == o))
        .unwrap_or_default();
    let (mut lo, mut got) = (0u64, 0u64);
    for (hi, t) in ranges {
        if t == o {
            got += hi - lo;
        }
        lo = hi;
    }
    got as f64 / (1u64 << 32) as f64
}

#[test]
fn a_new_pinned_instance_gets_most_new_flows_until_it_holds_its_share() {
    let dir = tempfile::tempdir().unwrap();
    let agents: Vec<FakeAgent> = (1..=3).map(FakeAgent::start).collect();
    let (_srv, c) = start(&dir.path().join("c.db"));
    let spec = SPEC.replace(
        "re: { type: middlebox, function: monitor }",
        "re: { type: middlebox, function: monitor, state: local }",
    );
    setup(&c, &agents, &spec);
    let vni = c.config(1).unwrap().tenants[0].vni;
    let re0 = placed(&c, "t/re/0");
    // re/0 holds 40 pinned flows; the instance about to be added holds none.
    let report = |re1: Option<((u32, u16), u64)>| {
        for a in &agents {
            let mut flows = Vec::new();
            if a.host == re0.0 {
                flows.push(PinnedFlows {
                    vni,
                    group: 0,
                    target: Output::Port(PortId(re0.1)),
                    flows: 40,
                    draining: false,
                });
            }
            if let Some((at, n)) = re1 {
                if a.host == at.0 {
                    flows.push(PinnedFlows {
                        vni,
                        group: 0,
                        target: Output::Port(PortId(at.1)),
                        flows: n,
                        draining: false,
                    });
                }
            }
            *a.pinned.lock().unwrap() = flows;
        }
    };
    report(None);
    c.scale(
        "t",
        "re",
        &ScaleRequest {
            instances: 2,
            drain_timeout_ms: None,
        },
    )
    .unwrap();
    let re1 = placed(&c, "t/re/1");
    report(Some((re1, 0)));
    let own = |o: (u32, u16)| target(re1.0, o.0, o.1);
    let (s1, s0) = (share_on(&c, re1.0, own(re1)), share_on(&c, re1.0, own(re0)));
    assert!(
        (s1 - 0.75).abs() < 0.01 && (s0 - 0.25).abs() < 0.01,
        "{s1} {s0}"
    );
    eventually("the catch-up is logged", || {
        c.events(0)
            .unwrap()
            .iter()
            .any(|e| e.kind == "catch-up" && e.reason.contains("75% of new flows"))
    });
    // Far from its share (20 of 50): it keeps the preference.
    report(Some((re1, 10)));
    std::thread::sleep(Duration::from_millis(400));
    assert!((share_on(&c, re1.0, own(re1)) - 0.75).abs() < 0.01);
    // 38 of 78 (target 39, within 10%): back to the even split.
    report(Some((re1, 38)));
    eventually("re/1 caught up", || {
        (share_on(&c, re1.0, own(re1)) - 0.5).abs() < 0.01
    });
    assert!(c
        .events(0)
        .unwrap()
        .iter()
        .any(|e| e.kind == "catch-up" && e.reason.contains("holds 38 of 78")));
    // Shared-state middleboxes never catch up (their flows move at once).
    c.scale(
        "t",
        "ips",
        &ScaleRequest {
            instances: 3,
            drain_timeout_ms: None,
        },
    )
    .unwrap();
    let ips2 = placed(&c, "t/ips/2");
    assert!((share_on(&c, ips2.0, target(ips2.0, ips2.0, ips2.1)) - 1.0 / 3.0).abs() < 0.01);
}
