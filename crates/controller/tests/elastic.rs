//! Health-driven failover, scaling and the scaler, end to end on loopback with
//! fake agents (tiny_http servers recording pushes and reporting pinned flows):
//! an instance reported dead leaves every host's groups and rejoins when alive;
//! a silent host's instances leave; scale out and in place instances and re-split
//! groups, and survive a controller restart; a local-state middlebox's groups are
//! pinned and a removed instance drains first; the greedy scaler fed a model
//! chain's metric converges and explains every step.

use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sluice_controller::api::{MetricSample, ScaleRequest, ScalingConfig};
use sluice_controller::client::Client;
use sluice_controller::{serve, ServerHandle, ServerOptions};
use sluice_proto::{
    AgentConfig, AgentStatus, ChainMeasure, HostHeartbeat, HostRegistration, InstanceHealth,
    PinnedFlows, VmRegistration,
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
    let h = serve(ServerOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        db: db.to_path_buf(),
        state_url: "redis://127.0.0.1:6379".into(),
    })
    .unwrap();
    let c = Client::new(&h.url());
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
    assert!(c.events(0).unwrap().is_empty());
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

#[test]
fn a_suspected_shared_state_instance_leaves_once_the_suspicion_lasts() {
    let dir = tempfile::tempdir().unwrap();
    let agents: Vec<FakeAgent> = (1..=3).map(FakeAgent::start).collect();
    let (_srv, c) = start(&dir.path().join("c.db"));
    setup(&c, &agents, SPEC);
    let ips1 = placed(&c, "t/ips/1");
    let _beat = Beater::start(
        &c,
        agents[1].registration(),
        vec![health("t/ips/1", ips1.1, true, true)],
    );
    eventually("a lasting suspicion takes ips/1 out", || {
        !in_any_group(&c, ips1)
    });
    let ev = c.events(0).unwrap();
    let f = ev
        .iter()
        .find(|e| e.kind == "failover")
        .expect("failover event");
    assert!(f.reason.contains("suspects"), "{}", f.reason);
}

#[test]
fn a_suspected_local_state_instance_keeps_its_flows_until_its_process_is_gone() {
    // With state inside the instances, moving flows on a mere suspicion would
    // break them: only a dead process leaves the groups.
    let dir = tempfile::tempdir().unwrap();
    let agents: Vec<FakeAgent> = (1..=3).map(FakeAgent::start).collect();
    let (_srv, c) = start(&dir.path().join("c.db"));
    let spec = SPEC.replace(
        "ips: { type: middlebox, function: monitor, instances: 2 }",
        "ips: { type: middlebox, function: monitor, instances: 2, state: local, affinity: hash }",
    );
    setup(&c, &agents, &spec);
    let ips1 = placed(&c, "t/ips/1");
    assert!(in_any_group(&c, ips1));
    let beat = Beater::start(
        &c,
        agents[1].registration(),
        vec![health("t/ips/1", ips1.1, true, true)],
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(in_any_group(&c, ips1), "suspected but alive: stays");
    assert!(c.events(0).unwrap().iter().all(|e| e.kind != "failover"));
    beat.set(vec![health("t/ips/1", ips1.1, false, true)]);
    eventually("ips/1 out once its process is gone", || {
        !in_any_group(&c, ips1)
    });
    let ev = c.events(0).unwrap();
    assert!(ev
        .iter()
        .any(|e| e.kind == "failover" && e.reason.contains("dead")));
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

/// Stratos Fig. 11's model: throughput is the demand capped by the weakest
/// middlebox (instances x capacity).
fn throughput(counts: &std::collections::BTreeMap<String, u32>, demand: f64) -> f64 {
    [("ips", 35.0), ("re", 55.0)]
        .iter()
        .map(|(m, cap)| cap * counts[*m] as f64)
        .fold(demand, f64::min)
}

#[test]
fn the_greedy_scaler_converges_and_explains_each_step() {
    let dir = tempfile::tempdir().unwrap();
    let agents: Vec<FakeAgent> = (1..=3).map(FakeAgent::start).collect();
    let (_srv, c) = start(&dir.path().join("c.db"));
    let spec = SPEC.replace("instances: 2", "instances: 1");
    setup(&c, &agents, &spec);
    // A sample with no scaler configured changes nothing.
    let ack = c
        .metric(
            "t",
            "ab",
            &MetricSample {
                value: 1.0,
                at_ms: None,
            },
        )
        .unwrap();
    assert!(!ack.enabled);
    let info = c
        .set_scaling(
            "t",
            "ab",
            &ScalingConfig {
                strategy: "greedy".into(),
                direction: Some("higher".into()),
                metric: "reported".into(),
                metric_interval_ms: 1000,
                improve: 0.1,
                trigger: 0.25,
                sustain_ms: 3000,
                window_ms: 5000,
                settle: 0.2,
                cooldown_ms: 20_000,
                budget: 10,
                target: Some(100.0),
            },
        )
        .unwrap();
    assert_eq!(info.middleboxes, vec!["ips".to_string(), "re".to_string()]);
    let mut counts = info.counts.clone();
    let mut decisions = 0;
    for s in 0..300u64 {
        let ack = c
            .metric(
                "t",
                "ab",
                &MetricSample {
                    value: throughput(&counts, 100.0),
                    at_ms: Some(s * 1000),
                },
            )
            .unwrap();
        decisions += ack.decisions.len();
        counts = ack.counts;
    }
    assert_eq!(counts["ips"], 3, "{counts:?}");
    assert_eq!(counts["re"], 2, "{counts:?}");
    assert!(decisions > 0);
    // The controller's configuration carries them.
    assert_eq!(c.middlebox("t", "ips").unwrap().placed.len(), 3);
    assert_eq!(c.middlebox("t", "re").unwrap().placed.len(), 2);
    let ev = c.events(0).unwrap();
    let scaler: Vec<&str> = ev
        .iter()
        .filter(|e| e.kind == "scaler")
        .map(|e| e.reason.as_str())
        .collect();
    assert!(
        scaler.iter().any(|w| w.starts_with("kept the new ips")),
        "{scaler:#?}"
    );
    assert!(
        scaler.iter().any(|w| w.starts_with("discarded the new")),
        "{scaler:#?}"
    );
    assert!(
        scaler.iter().any(|w| w.contains("another pass")),
        "{scaler:#?}"
    );
    // Every carried-out decision is a scale event naming its reason.
    let scales: Vec<&str> = ev
        .iter()
        .filter(|e| e.kind == "scale")
        .map(|e| e.reason.as_str())
        .collect();
    assert_eq!(scales.len(), decisions, "{scales:#?}");
    assert!(
        scales.iter().all(|w| w.contains("(scaler of chain ab: ")),
        "{scales:#?}"
    );

    // Load halves and the operator asks for a scale-down: it removes what is
    // not needed.
    c.scaling_request(
        "t",
        "ab",
        &sluice_controller::api::ScalingRequest {
            up: false,
            reason: "load halved".into(),
        },
    )
    .unwrap();
    for t in 300..420u64 {
        let ack = c
            .metric(
                "t",
                "ab",
                &MetricSample {
                    value: throughput(&counts, 50.0),
                    at_ms: Some(t * 1000),
                },
            )
            .unwrap();
        counts = ack.counts;
    }
    assert!(throughput(&counts, 50.0) >= 50.0, "{counts:?}");
    assert!(counts.values().sum::<u32>() < 5, "{counts:?}");
    assert!(c
        .events(0)
        .unwrap()
        .iter()
        .any(|e| e.kind == "scaler" && e.reason.starts_with("load halved")));
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

#[test]
fn a_scaler_can_follow_the_handshake_time_the_agents_measure() {
    let dir = tempfile::tempdir().unwrap();
    let agents: Vec<FakeAgent> = (1..=3).map(FakeAgent::start).collect();
    let (_srv, c) = start(&dir.path().join("c.db"));
    setup(&c, &agents, SPEC);
    let vni = c.config(1).unwrap().tenants[0].vni;
    // A bad combination is refused, naming the field.
    let bad = ScalingConfig {
        metric: "handshake_ms".into(),
        direction: Some("higher".into()),
        ..ScalingConfig::default()
    };
    let e = format!("{:?}", c.set_scaling("t", "ab", &bad).unwrap_err());
    assert!(e.contains("direction") && e.contains("handshake_ms"), "{e}");
    let info = c
        .set_scaling(
            "t",
            "ab",
            &ScalingConfig {
                strategy: "greedy".into(),
                metric: "handshake_ms".into(),
                metric_interval_ms: 100,
                improve: 0.1,
                trigger: 0.25,
                sustain_ms: 300,
                window_ms: 1000,
                settle: 0.2,
                cooldown_ms: 60_000,
                budget: 10,
                target: Some(12.0),
                ..ScalingConfig::default()
            },
        )
        .unwrap();
    assert_eq!(info.config.direction, None);
    // The application's own samples are refused while the agents measure.
    let e = format!(
        "{:?}",
        c.metric(
            "t",
            "ab",
            &MetricSample {
                value: 1.0,
                at_ms: None
            }
        )
        .unwrap_err()
    );
    assert!(e.contains("agents measure"), "{e}");
    // The client's host measures handshakes through the chain: 20 per 50 ms,
    // each taking as long as the slower middlebox makes it (30 ms / re
    // instances, 20 ms / ips instances), the chain's id 0 (its forward way).
    let stop = Arc::new(AtomicBool::new(false));
    let (c2, s2) = (c.clone(), stop.clone());
    let reg = agents[0].registration();
    let beat = std::thread::spawn(move || {
        let mut m = ChainMeasure {
            vni,
            chain: 0,
            ..ChainMeasure::default()
        };
        while !s2.load(Ordering::SeqCst) {
            let n = |mb: &str| c2.middlebox("t", mb).map_or(1, |i| i.placed.len()) as f64;
            let ms = (30.0 / n("re")).max(20.0 / n("ips"));
            m.syns += 20;
            m.handshakes += 20;
            m.handshake_ns += (20.0 * ms * 1e6) as u64;
            m.bytes += 20 * 600;
            let hb = HostHeartbeat {
                registration: reg.clone(),
                instances: Vec::new(),
                chains: vec![m.clone()],
            };
            let _ = c2.heartbeat(&hb);
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    eventually("the agents' handshake time is sampled", || {
        c.scaling("t", "ab")
            .unwrap()
            .measured
            .and_then(|m| m.value)
            .is_some_and(|v| (v - 30.0).abs() < 0.5)
    });
    // re is the bottleneck: the scaler keeps adding re until the target is met.
    eventually("re scaled to 3", || {
        c.middlebox("t", "re").unwrap().placed.len() == 3
    });
    stop.store(true, Ordering::SeqCst);
    beat.join().unwrap();
    let ev = c.events(0).unwrap();
    assert!(
        ev.iter()
            .any(|e| e.kind == "scale" && e.reason.contains("add re")),
        "{ev:#?}"
    );
    assert_eq!(c.middlebox("t", "ips").unwrap().placed.len(), 2);
}
