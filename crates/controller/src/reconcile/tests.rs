//! The reconciler on a simulated clock: health, silence, drains, catch-ups,
//! leases, pushes and autoscaling, each at the exact moment its rule says, with
//! no thread, socket or sleep. Requests go through the same parser and executor
//! as over HTTP.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use sluice_proto::{
    ChainMeasure, CheckOutcome, HostHeartbeat, HostRegistration, InstanceHealth, PinnedFlows,
};
use sluice_switch::{HostId, Output, PortId};

use super::*;
use crate::model::EventInfo;
use crate::resources::{self, Reply, Request};
use crate::store::MemoryStore;

const SPEC: &str = "tenant: t
elements:
  a: { type: service, vms: { a1: 10.0.0.1 } }
  b: { type: service, vms: { b1: 10.0.0.2 } }
  ips: { type: middlebox, function: monitor, instances: 2 }
  re: { type: middlebox, function: monitor }
chains:
  - { name: ab, path: [a, ips, re, b] }
";

const MS: Duration = Duration::from_millis(1);
/// The unix time the simulated clock starts at.
const EPOCH_MS: u64 = 1_700_000_000_000;

/// A reconciler, its store and a simulated clock.
struct Sim {
    r: Reconciler,
    store: MemoryStore,
    now: Instant,
    /// Agents' reported versions: what each host "runs" (all pushes succeed).
    running: BTreeMap<u32, u64>,
}

impl Sim {
    /// Three hosts, the two VMs, and `spec` applied.
    fn new(spec: &str) -> Sim {
        let store = MemoryStore::new();
        let now = Instant::now();
        let r = Reconciler::start(Box::new(store.clone()), "local", now, EPOCH_MS).unwrap();
        let mut s = Sim {
            r,
            store,
            now,
            running: BTreeMap::new(),
        };
        for h in 1..=3 {
            s.beat(h, None);
        }
        s.ok("PUT", "/v1/vms/t/a1", &vm("a1", 1, "10.0.0.1"));
        s.ok("PUT", "/v1/vms/t/b1", &vm("b1", 3, "10.0.0.2"));
        s.ok("POST", "/v1/tenants", spec);
        s
    }

    /// Carries out a request as the HTTP edge would.
    fn call(
        &mut self,
        method: &str,
        url: &str,
        body: &str,
    ) -> Result<Reply, crate::error::ApiError> {
        let a = resources::parse(&Request {
            method,
            url,
            content_type: None,
            body,
            if_match: None,
        })?;
        crate::executor::execute(&mut self.r, a, self.now)
    }

    /// [`Sim::call`] with an `If-Match` header.
    fn call_if(
        &mut self,
        method: &str,
        url: &str,
        body: &str,
        if_match: &str,
    ) -> Result<Reply, crate::error::ApiError> {
        let a = resources::parse(&Request {
            method,
            url,
            content_type: None,
            body,
            if_match: Some(if_match),
        })?;
        crate::executor::execute_as(&mut self.r, a, "tester", self.now)
    }

    fn ok(&mut self, method: &str, url: &str, body: &str) -> serde_json::Value {
        match self.call(method, url, body) {
            Ok(Reply::Json(_, v)) => v,
            Ok(Reply::Text(..)) => serde_json::Value::Null,
            Err(e) => panic!("{method} {url}: {e}"),
        }
    }

    /// Host `h` heartbeats, reporting `health` (None: no health at all).
    fn beat(&mut self, h: u32, health: Option<Vec<InstanceHealth>>) {
        self.beat_with(h, health, Vec::new());
    }

    fn beat_with(
        &mut self,
        h: u32,
        health: Option<Vec<InstanceHealth>>,
        chains: Vec<ChainMeasure>,
    ) {
        let reports_health = health.is_some();
        let mut hb = self.heartbeat_of(h);
        hb.instances = health.unwrap_or_default();
        hb.chains = chains;
        self.r
            .heartbeat(
                Heartbeat {
                    hb,
                    pinned: None,
                    reports_health,
                },
                self.now,
            )
            .unwrap();
    }

    /// Host `h`'s heartbeat with nothing to report, at the version it runs.
    fn heartbeat_of(&self, h: u32) -> HostHeartbeat {
        HostHeartbeat {
            registration: HostRegistration {
                host: h,
                name: format!("h{h}"),
                underlay: Ipv4Addr::new(10, 255, 0, h as u8),
                api: format!("http://127.0.0.1:{}", 9000 + h),
                config_version: self.running.get(&h).copied().unwrap_or(0),
                api_token: None,
                capacity: None,
                api_csr: None,
            },
            instances: Vec::new(),
            chains: Vec::new(),
            accusations: Vec::new(),
            backend_checks: Vec::new(),
            peers: Vec::new(),
        }
    }

    /// Runs every push the reconciler asked for (each agent takes its
    /// configuration at once); returns the hosts pushed.
    fn push_all(&mut self) -> Vec<u32> {
        let fx = self.r.take_effects();
        let mut pushed = Vec::new();
        for h in fx.pushes.keys() {
            if let Some(job) = self.r.push_started(*h, self.now) {
                self.running.insert(*h, job.config.version);
                self.r
                    .push_finished(*h, job.config.version, Ok(()), self.now);
                pushed.push(*h);
            }
        }
        pushed
    }

    /// Advances the clock by `d` in ticks of 20 ms (as the service does).
    fn run(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now < end {
            self.now = (self.now + 20 * MS).min(end);
            self.r.tick(self.now);
        }
    }

    fn port(&self, name: &str) -> (u32, u16) {
        let (_, i) = self.r.desired().instance_by_name(name).expect(name);
        (i.host, i.port)
    }

    /// Whether the groups of `name`'s own host send flows to it (its port is
    /// its alone; other hosts see only its host, which other instances share).
    fn in_any_group(&self, name: &str) -> bool {
        let (ih, port) = self.port(name);
        let want = Output::Port(PortId(port));
        self.r.configs().get(&ih).is_some_and(|c| {
            c.tenants
                .iter()
                .flat_map(|t| t.groups.iter())
                .any(|(_, g)| g.ranges.iter().any(|r| r.1 == want))
        })
    }

    fn events(&self, kind: &str) -> Vec<EventInfo> {
        self.r.events().since(0, Some(kind)).cloned().collect()
    }

    fn count(&self, mb: &str) -> u32 {
        self.r.desired().count("t", mb).unwrap_or(0)
    }
}

fn vm(name: &str, host: u32, addr: &str) -> String {
    format!(
        r#"{{"tenant": "t", "name": "{name}", "host": {host}, "iface": "v-{name}",
            "mac": "02:00:00:00:00:07", "addr": "{addr}", "gateway": false}}"#
    )
}

fn health(name: &str, alive: bool, suspected: bool) -> InstanceHealth {
    InstanceHealth {
        name: name.into(),
        alive,
        suspected,
        last_heartbeat_age_ms: Some(if suspected { 120 } else { 5 }),
        ..InstanceHealth::default()
    }
}

#[test]
fn a_catching_up_instance_is_done_near_its_share() {
    assert!(caught_up(0, 0, 2), "no flows: nothing to catch up");
    assert!(!caught_up(10, 50, 2));
    assert!(caught_up(38, 78, 2));
    assert!(caught_up(30, 90, 3) && !caught_up(26, 90, 3));
}

#[test]
fn a_dead_instance_leaves_at_once_and_rejoins_after_rejoin_after() {
    let mut s = Sim::new(SPEC);
    assert_eq!(s.port("t/ips/1").0, 2, "ips/1 goes to the second host");
    s.push_all();
    let v1 = s.r.configs()[&1].version;
    // Never heard from and not running: still starting, left alone.
    let mut starting = health("t/ips/1", false, false);
    starting.last_heartbeat_age_ms = None;
    s.beat(2, Some(vec![starting]));
    assert!(s.in_any_group("t/ips/1"));
    assert!(s.r.events().since(0, None).next().is_none());

    s.beat(2, Some(vec![health("t/ips/1", false, false)]));
    assert!(
        !s.in_any_group("t/ips/1"),
        "dead: out in the same heartbeat"
    );
    assert!(s.r.configs()[&1].version > v1);
    let f = &s.events("failover")[0];
    assert!(f.reason.contains("dead"), "{}", f.reason);
    assert_eq!(f.first_report_ms, Some(EPOCH_MS));
    assert_eq!(f.push_sent_ms, None, "not pushed yet");
    // Every host whose groups changed is pushed; then the event has its time.
    let fx_hosts = s.push_all();
    assert!(
        fx_hosts.contains(&1) && fx_hosts.contains(&3),
        "{fx_hosts:?}"
    );
    assert_eq!(s.events("failover")[0].push_sent_ms, Some(EPOCH_MS));
    assert_eq!(
        s.r.desired().down.iter().cloned().collect::<Vec<_>>(),
        vec![("t".to_string(), "ips".to_string(), 1)]
    );

    // Healthy again: back only after REJOIN_AFTER of healthy reports.
    s.beat(2, Some(vec![health("t/ips/1", true, false)]));
    s.now += REJOIN_AFTER - MS;
    s.beat(2, Some(vec![health("t/ips/1", true, false)]));
    assert!(!s.in_any_group("t/ips/1"), "healthy for 99 ms: still out");
    s.now += MS;
    s.beat(2, Some(vec![health("t/ips/1", true, false)]));
    assert!(s.in_any_group("t/ips/1"));
    assert!(s.events("rejoin")[0].reason.contains("for 100 ms"));
    assert!(s.r.desired().down.is_empty());
}

#[test]
fn a_flapping_report_restarts_the_rejoin_wait() {
    let mut s = Sim::new(SPEC);
    s.beat(2, Some(vec![health("t/ips/1", false, false)]));
    s.beat(2, Some(vec![health("t/ips/1", true, false)]));
    s.now += 60 * MS;
    s.beat(2, Some(vec![health("t/ips/1", true, true)]));
    s.now += 60 * MS;
    s.beat(2, Some(vec![health("t/ips/1", true, false)]));
    assert!(
        !s.in_any_group("t/ips/1"),
        "120 ms since down, but healthy for 0"
    );
    s.now += REJOIN_AFTER;
    s.beat(2, Some(vec![health("t/ips/1", true, false)]));
    assert!(s.in_any_group("t/ips/1"));
}

#[test]
fn a_suspicion_takes_a_shared_state_instance_out_only_once_it_lasts() {
    let mut s = Sim::new(SPEC);
    s.beat(2, Some(vec![health("t/ips/1", true, true)]));
    s.now += SUSPECT_CONFIRM - MS;
    s.beat(2, Some(vec![health("t/ips/1", true, true)]));
    assert!(s.in_any_group("t/ips/1"), "suspected for 149 ms: stays");
    assert!(s.events("failover").is_empty());
    s.now += MS;
    s.beat(2, Some(vec![health("t/ips/1", true, true)]));
    assert!(!s.in_any_group("t/ips/1"));
    assert!(s.events("failover")[0].reason.contains("suspects"));
}

#[test]
fn an_interrupted_suspicion_starts_over() {
    let mut s = Sim::new(SPEC);
    s.beat(2, Some(vec![health("t/ips/1", true, true)]));
    s.now += 100 * MS;
    s.beat(2, Some(vec![health("t/ips/1", true, false)]));
    s.now += 100 * MS;
    s.beat(2, Some(vec![health("t/ips/1", true, true)]));
    s.now += 100 * MS;
    s.beat(2, Some(vec![health("t/ips/1", true, true)]));
    assert!(
        s.in_any_group("t/ips/1"),
        "two suspicions of 100 ms are not one of 200"
    );
}

#[test]
fn a_suspected_local_state_instance_stays_until_its_process_is_gone() {
    let spec = SPEC.replace(
        "ips: { type: middlebox, function: monitor, instances: 2 }",
        "ips: { type: middlebox, function: monitor, instances: 2, state: local, affinity: hash }",
    );
    let mut s = Sim::new(&spec);
    for _ in 0..20 {
        s.now += 50 * MS;
        s.beat(2, Some(vec![health("t/ips/1", true, true)]));
    }
    assert!(
        s.in_any_group("t/ips/1"),
        "suspected for 1 s but alive: stays"
    );
    s.beat(2, Some(vec![health("t/ips/1", false, true)]));
    assert!(!s.in_any_group("t/ips/1"));
    assert!(s.events("failover")[0].reason.contains("dead"));
}

#[test]
fn a_silent_host_loses_its_instances_until_it_is_heard_again() {
    let mut s = Sim::new(SPEC);
    s.beat(2, Some(vec![health("t/ips/1", true, false)]));
    s.run(HOST_SILENT);
    assert!(
        s.in_any_group("t/ips/1"),
        "silent for exactly 300 ms: not yet"
    );
    s.run(20 * MS);
    assert!(!s.in_any_group("t/ips/1"));
    assert!(s.events("failover")[0].reason.contains("silent"));
    // Heard again, not reporting on it: back at once.
    s.beat(2, Some(Vec::new()));
    assert!(s.in_any_group("t/ips/1"));
    assert!(s.events("rejoin")[0].reason.contains("heard from again"));
}

impl Sim {
    /// Host `h` heartbeats reporting `health`; the interval it was told, ms.
    fn beat_told(&mut self, h: u32, health: Vec<InstanceHealth>) -> u64 {
        let mut hb = self.heartbeat_of(h);
        hb.instances = health;
        let ack = self
            .r
            .heartbeat(
                Heartbeat {
                    hb,
                    pinned: None,
                    reports_health: true,
                },
                self.now,
            )
            .unwrap();
        ack.heartbeat_ms.expect("the answer tells the interval")
    }

    /// Makes the fleet `n` hosts: registered hosts (ids from 1,000) that
    /// never heartbeat are added or removed, as a large fleet would count.
    fn fleet_of(&mut self, n: usize) {
        let real = 3;
        let d = &mut self.r.desired;
        d.hosts.retain(|id, _| *id < 1000);
        for id in 1000..(1000 + n.saturating_sub(real) as u32) {
            d.hosts.insert(
                id,
                crate::desired::Host {
                    id,
                    name: format!("filler{id}"),
                    underlay: Ipv4Addr::from(0x0b00_0000 | id),
                    api: format!("http://127.0.0.1:1/{id}"),
                    capacity: None,
                },
            );
        }
        assert_eq!(self.r.desired.hosts.len(), n.max(real));
    }
}

#[test]
fn a_small_fleet_heartbeats_every_50_ms_and_fails_over_after_300_ms() {
    let mut s = Sim::new(SPEC);
    assert_eq!(s.beat_told(2, vec![health("t/ips/1", true, false)]), 50);
    s.run(HOST_SILENT);
    assert!(s.in_any_group("t/ips/1"));
    s.run(20 * MS);
    assert!(!s.in_any_group("t/ips/1"), "silent for six beats of 50 ms");
}

#[test]
fn a_host_of_a_large_fleet_is_silent_after_six_of_its_intervals_not_300_ms() {
    let mut s = Sim::new(SPEC);
    s.fleet_of(4000);
    // 4,000 hosts within 800 heartbeats a second: one each 5 s.
    assert_eq!(s.beat_told(2, vec![health("t/ips/1", true, false)]), 5000);
    s.run(Duration::from_secs(1));
    assert!(
        s.in_any_group("t/ips/1"),
        "1 s is not silence at 5 s a beat"
    );
    let hosts = s.ok("GET", "/v1/hosts", "");
    let h2 = hosts
        .as_array()
        .and_then(|a| a.iter().find(|h| h["id"] == 2))
        .expect("host 2 listed");
    assert_eq!(h2["alive"], true, "{h2}");
    s.run(Duration::from_secs(29));
    assert!(
        s.in_any_group("t/ips/1"),
        "silent for exactly six intervals"
    );
    s.run(20 * MS);
    assert!(!s.in_any_group("t/ips/1"));
    assert!(s.events("failover")[0].reason.contains("silent for 30"));
    // Taken for dead as much later than today's 10 s as its silence
    // threshold is later than 300 ms.
    assert!(s.events("evacuated").is_empty());
    s.run(Duration::from_millis(9700) - 20 * MS);
    assert!(s.events("evacuated").is_empty());
    s.run(20 * MS);
    assert_eq!(s.events("evacuated").len(), 1);
}

#[test]
fn a_host_beating_as_told_is_never_silent_while_the_fleet_grows_or_shrinks() {
    let mut s = Sim::new(SPEC);
    let mut told = Vec::new();
    // The fleet grows by 500 hosts between two of the host's heartbeats,
    // then shrinks back to 3: each time the host heartbeats only after the
    // interval it was told before the change.
    let sizes: Vec<usize> = (1..=12).map(|k| k * 500).chain([3, 3]).collect();
    for n in sizes {
        let every = s.beat_told(2, vec![health("t/ips/1", true, false)]);
        told.push(every);
        s.fleet_of(n);
        // A little late, as a loaded agent would be.
        s.run(Duration::from_millis(every) + 30 * MS);
        assert!(
            s.in_any_group("t/ips/1"),
            "fleet of {n}: told {every} ms, heard {} ms ago",
            every + 30
        );
    }
    assert!(s.events("failover").is_empty());
    assert_eq!(told[0], 50);
    assert_eq!(told[11], 6875, "5,500 hosts");
    assert_eq!(told[12], 7500, "6,000 hosts, then shrunk to 3 (above)");
    assert_eq!(*told.last().unwrap(), 50);
    // Told 50 ms again, it is silent after 300 ms again.
    s.run(HOST_SILENT);
    assert!(!s.in_any_group("t/ips/1"));
}

#[test]
fn an_instance_reported_healthy_after_its_host_was_silent_waits_rejoin_after() {
    let mut s = Sim::new(SPEC);
    s.beat(2, Some(vec![health("t/ips/1", true, false)]));
    s.run(HOST_SILENT + 20 * MS);
    assert!(!s.in_any_group("t/ips/1"));
    s.beat(2, Some(vec![health("t/ips/1", true, false)]));
    assert!(
        !s.in_any_group("t/ips/1"),
        "a report about it: the usual wait"
    );
    s.now += REJOIN_AFTER;
    s.beat(2, Some(vec![health("t/ips/1", true, false)]));
    assert!(s.in_any_group("t/ips/1"));
}

#[test]
fn hosts_that_never_report_health_are_not_watched() {
    let mut s = Sim::new(SPEC);
    s.run(Duration::from_secs(2));
    assert!(s.in_any_group("t/ips/1"));
    assert!(s.events("failover").is_empty());
}

#[test]
fn when_every_watched_host_is_silent_the_controller_suspects_itself() {
    let mut s = Sim::new(SPEC);
    for h in 1..=3 {
        s.beat(h, Some(Vec::new()));
    }
    s.run(Duration::from_secs(1));
    assert!(
        s.events("failover").is_empty(),
        "{:?}",
        s.events("failover")
    );
    assert!(s.r.desired().down.is_empty());
}

#[test]
fn a_stalled_ticker_does_not_take_silence_for_failure() {
    let mut s = Sim::new(SPEC);
    s.beat(2, Some(Vec::new()));
    s.r.tick(s.now);
    // The ticker itself was held up for 400 ms: heartbeats may be waiting unread.
    s.now += 400 * MS;
    s.r.tick(s.now);
    assert!(s.r.desired().down.is_empty());
    s.now += 20 * MS;
    s.r.tick(s.now);
    assert!(!s.r.desired().down.is_empty(), "the next regular tick acts");
}

#[test]
fn a_stale_agent_is_pushed_again_at_most_every_repush_after() {
    let mut s = Sim::new(SPEC);
    s.push_all();
    // Host 1 says it runs an older version (the push was lost).
    s.running.insert(1, 1);
    s.beat(1, None);
    assert!(s.r.take_effects().pushes.is_empty(), "just pushed: wait");
    s.now += REPUSH_AFTER;
    s.beat(1, None);
    let fx = s.r.take_effects();
    assert_eq!(fx.pushes.keys().copied().collect::<Vec<_>>(), vec![1]);
}

#[test]
fn a_report_sent_while_a_push_was_applied_does_not_push_it_again() {
    let mut s = Sim::new(SPEC);
    s.push_all();
    // A new version for host 1 whose push is slow (the agent starts
    // instances): heartbeats from before it applied keep coming.
    let old = s.running[&1];
    s.r.configs.get_mut(&1).unwrap().version += 1;
    s.r.schedule_push(1, s.now);
    assert_eq!(s.r.take_effects().pushes.len(), 1);
    // Queued, not started yet (the dispatcher is about to).
    s.now += REPUSH_AFTER * 3;
    s.beat(1, None);
    assert!(s.r.take_effects().pushes.is_empty(), "queued: wait for it");
    let job = s.r.push_started(1, s.now).unwrap();
    s.now += REPUSH_AFTER * 3;
    s.beat(1, None);
    assert!(
        s.r.take_effects().pushes.is_empty(),
        "in flight: wait for it"
    );
    s.r.push_finished(1, job.config.version, Ok(()), s.now);
    // The report the agent sent just before it answered arrives after.
    s.now += REPUSH_AFTER / 2;
    assert_eq!(s.running[&1], old);
    s.beat(1, None);
    assert!(
        s.r.take_effects().pushes.is_empty(),
        "it just answered: wait"
    );
    // Still behind a while later: it lost the version, push it again.
    s.now += REPUSH_AFTER;
    s.beat(1, None);
    assert_eq!(
        s.r.take_effects()
            .pushes
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        vec![1]
    );
}

#[test]
fn failed_pushes_retry_with_exponential_backoff() {
    let mut s = Sim::new(SPEC);
    s.r.take_effects();
    let mut waits = Vec::new();
    for _ in 0..8 {
        let job = s.r.push_started(2, s.now).unwrap();
        s.r.push_finished(
            2,
            job.config.version,
            Err("connection refused".into()),
            s.now,
        );
        let at = s.r.take_effects().pushes[&2];
        waits.push((at - s.now).as_millis() as u64);
        s.now = at;
    }
    assert_eq!(waits, vec![200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
    let v = s.ok("GET", "/v1/hosts", "");
    assert_eq!(v[1]["push_error"], "connection refused");
    let job = s.r.push_started(2, s.now).unwrap();
    s.r.push_finished(2, job.config.version, Ok(()), s.now);
    assert!(s.r.take_effects().pushes.is_empty());
    let v = s.ok("GET", "/v1/hosts", "");
    assert!(v[1]["push_error"].is_null());
}

#[test]
fn host_liveness_follows_the_simulated_clock() {
    let mut s = Sim::new(SPEC);
    s.now += ALIVE;
    let v = s.ok("GET", "/v1/hosts", "");
    assert_eq!(v[0]["alive"], true);
    assert_eq!(v[0]["last_heartbeat_ms"], 1000);
    s.now += MS;
    let v = s.ok("GET", "/v1/hosts", "");
    assert_eq!(v[0]["alive"], false);
}

#[test]
fn scaling_places_resplits_and_survives_a_restart() {
    let mut s = Sim::new(SPEC);
    assert_eq!(s.port("t/re/0").0, 3);
    s.push_all();
    s.ok("PUT", "/v1/tenants/t/middleboxes/re", r#"{"instances": 3}"#);
    assert_eq!(s.count("re"), 3);
    for k in 0..3 {
        assert!(s.in_any_group(&format!("t/re/{k}")));
    }
    assert_eq!(s.push_all().len(), 3, "every host's groups changed");
    let before = (s.r.desired().clone(), s.r.configs().clone());
    // A new reconciler on the same store carries on with the same state.
    let r2 = Reconciler::start(Box::new(s.store.clone()), "local", s.now, EPOCH_MS).unwrap();
    assert_eq!(r2.desired(), &before.0);
    assert_eq!(r2.configs(), &before.1);
    // Scale in: shared state, so re/2 goes at once.
    let saves = s.store.saves();
    s.ok("PUT", "/v1/tenants/t/middleboxes/re", r#"{"instances": 1}"#);
    assert_eq!(s.count("re"), 1);
    assert!(s.r.desired().instance_by_name("t/re/2").is_none());
    assert!(s.store.saves() > saves);
    assert!(s.events("scale")[1].reason.contains("3 -> 1"));
}

#[test]
fn a_refused_change_changes_nothing() {
    let mut s = Sim::new(SPEC);
    let before = (
        s.r.desired().clone(),
        s.r.configs().clone(),
        s.store.saves(),
    );
    let e = s
        .call(
            "PUT",
            "/v1/tenants/t/middleboxes/nope",
            r#"{"instances": 3}"#,
        )
        .unwrap_err();
    assert_eq!(e.status, 404);
    let e = s.call("DELETE", "/v1/vms/t/a1", "").unwrap_err();
    assert_eq!(e.status, 409, "{e}");
    assert_eq!(
        (
            s.r.desired().clone(),
            s.r.configs().clone(),
            s.store.saves()
        ),
        before
    );
    assert!(s.r.take_effects().pushes.is_empty() || s.r.take_effects().pushes.is_empty());
}

/// SPEC with `ips` pinned (local state): removed instances drain.
fn pinned_spec() -> String {
    SPEC.replace(
        "ips: { type: middlebox, function: monitor, instances: 2 }",
        "ips: { type: middlebox, function: monitor, instances: 2, state: local }",
    )
}

fn pinned(vni: u32, target: Output, flows: u64) -> PinnedFlows {
    PinnedFlows {
        vni,
        group: 0,
        target,
        flows,
        draining: false,
    }
}

#[test]
fn a_drain_ends_when_no_flow_is_pinned_to_the_instance() {
    let mut s = Sim::new(&pinned_spec());
    s.push_all();
    let vni = s.r.desired().tenants["t"].vni;
    s.ok(
        "PUT",
        "/v1/tenants/t/middleboxes/ips",
        r#"{"instances": 1}"#,
    );
    assert!(s.events("drain")[0].reason.contains("t/ips/1 draining"));
    s.push_all();
    let (ih, port) = s.port("t/ips/1");
    s.run(20 * MS);
    let polls = s.r.take_effects().polls;
    assert!(
        !polls.is_empty(),
        "the hosts that pin flows to it are asked"
    );
    // Asked again no sooner than DRAIN_POLL.
    s.run(20 * MS);
    assert!(s.r.take_effects().polls.is_empty());
    s.run(DRAIN_POLL);
    assert_eq!(
        s.r.take_effects().polls.keys().collect::<Vec<_>>(),
        polls.keys().collect::<Vec<_>>()
    );
    // Flows still pinned somewhere: it stays.
    for h in polls.keys() {
        let o = if *h == ih {
            Output::Port(PortId(port))
        } else {
            Output::Host(HostId(ih))
        };
        let v = s.r.configs()[h].version;
        s.r.pinned_report(*h, v, vec![pinned(vni, o, 3)], s.now);
    }
    s.run(20 * MS);
    assert!(s.r.desired().draining.len() == 1);
    // A report for an older configuration proves nothing.
    for h in polls.keys() {
        s.r.pinned_report(*h, 0, Vec::new(), s.now);
    }
    s.run(20 * MS);
    assert!(s.r.desired().draining.len() == 1);
    for h in polls.keys() {
        let v = s.r.configs()[h].version;
        s.r.pinned_report(*h, v, Vec::new(), s.now);
    }
    s.run(20 * MS);
    assert!(s.r.desired().draining.is_empty());
    assert!(s.r.desired().instance_by_name("t/ips/1").is_none());
    assert!(s.events("drain")[1].reason.contains("no flow is pinned"));
}

#[test]
fn a_drain_ends_at_its_timeout() {
    let mut s = Sim::new(&pinned_spec());
    s.ok(
        "PUT",
        "/v1/tenants/t/middleboxes/ips",
        r#"{"instances": 1, "drain_timeout_ms": 500}"#,
    );
    // The drain's clock starts when the ticker first sees it.
    s.run(20 * MS);
    s.run(480 * MS);
    assert_eq!(s.r.desired().draining.len(), 1);
    s.run(20 * MS);
    assert!(s.r.desired().draining.is_empty());
    assert!(s.events("drain")[1].reason.contains("timeout of 500 ms"));
}

#[test]
fn a_new_pinned_instance_catches_up_to_its_share() {
    let mut s = Sim::new(
        &pinned_spec().replace("instances: 2, state: local", "instances: 1, state: local"),
    );
    s.push_all();
    let vni = s.r.desired().tenants["t"].vni;
    s.ok(
        "PUT",
        "/v1/tenants/t/middleboxes/ips",
        r#"{"instances": 2}"#,
    );
    s.push_all();
    s.run(20 * MS);
    assert!(s.events("catch-up")[0].reason.contains("75% of new flows"));
    let report = |s: &mut Sim, old: u64, new: u64| {
        for (name, n) in [("t/ips/0", old), ("t/ips/1", new)] {
            let (h, port) = s.port(name);
            let v = s.r.configs()[&h].version;
            s.r.pinned_report(
                h,
                v,
                vec![pinned(vni, Output::Port(PortId(port)), n)],
                s.now,
            );
        }
    };
    report(&mut s, 90, 10);
    s.run(20 * MS);
    assert_eq!(s.r.desired().catching_up.len(), 1, "10 of 100: not yet");
    report(&mut s, 55, 45);
    s.run(20 * MS);
    assert!(
        s.r.desired().catching_up.is_empty(),
        "45 of 100 is 0.9 of its share"
    );
    assert!(s.events("catch-up")[1].reason.contains("holds 45 of 100"));
}

#[test]
fn a_catch_up_ends_at_its_timeout() {
    let mut s = Sim::new(
        &pinned_spec().replace("instances: 2, state: local", "instances: 1, state: local"),
    );
    s.ok(
        "PUT",
        "/v1/tenants/t/middleboxes/ips",
        r#"{"instances": 2}"#,
    );
    s.run(CATCH_UP_TIMEOUT);
    assert_eq!(s.r.desired().catching_up.len(), 1);
    s.run(20 * MS);
    assert!(s.r.desired().catching_up.is_empty());
    assert!(s.events("catch-up")[1].reason.contains("60 s passed"));
}

/// Stratos Fig. 11's model: throughput is the demand capped by the weakest
/// middlebox (instances x capacity).
fn throughput(counts: &BTreeMap<String, u32>, demand: f64) -> f64 {
    [("ips", 35.0), ("re", 55.0)]
        .iter()
        .map(|(m, cap)| cap * counts[*m] as f64)
        .fold(demand, f64::min)
}

#[test]
fn the_greedy_scaler_converges_on_reported_samples() {
    let mut s = Sim::new(&SPEC.replace("instances: 2", "instances: 1"));
    let v = s.ok(
        "PUT",
        "/v1/tenants/t/chains/ab/scaling",
        r#"{"strategy": "greedy", "direction": "higher", "metric": "reported",
            "metric_interval_ms": 1000, "improve": 0.1, "trigger": 0.25, "sustain_ms": 3000,
            "window_ms": 5000, "settle": 0.2, "cooldown_ms": 20000, "budget": 10,
            "target": 100.0}"#,
    );
    assert_eq!(v["middleboxes"], serde_json::json!(["ips", "re"]));
    for _ in 0..300 {
        s.now += Duration::from_secs(1);
        let counts: BTreeMap<String, u32> = [("ips", s.count("ips")), ("re", s.count("re"))]
            .map(|(m, n)| (m.to_string(), n))
            .into();
        let value = throughput(&counts, 100.0);
        s.ok(
            "POST",
            "/v1/tenants/t/chains/ab/metrics",
            &format!(r#"{{"value": {value}}}"#),
        );
    }
    // 100 needs 3 ips (105) and 2 re (110): the least that meets the target.
    assert_eq!((s.count("ips"), s.count("re")), (3, 2));
    let scaler: Vec<String> = s.events("scaler").into_iter().map(|e| e.reason).collect();
    for step in ["kept the new ips", "discarded the new", "another pass"] {
        assert!(
            scaler.iter().any(|w| w.contains(step)),
            "{step}: {scaler:#?}"
        );
    }
    let scales = s.events("scale");
    assert!(!scales.is_empty());
    assert!(
        scales
            .iter()
            .all(|e| e.reason.contains("(scaler of chain ab: ")),
        "{scales:#?}"
    );
    // Load halves and the operator asks for a scale-down: what is not needed goes.
    s.ok(
        "POST",
        "/v1/tenants/t/chains/ab/scaling/request",
        r#"{"up": false, "reason": "load halved"}"#,
    );
    for _ in 0..120 {
        s.now += Duration::from_secs(1);
        let counts: BTreeMap<String, u32> = [("ips", s.count("ips")), ("re", s.count("re"))]
            .map(|(m, n)| (m.to_string(), n))
            .into();
        let value = throughput(&counts, 50.0);
        s.ok(
            "POST",
            "/v1/tenants/t/chains/ab/metrics",
            &format!(r#"{{"value": {value}}}"#),
        );
    }
    assert!(s.count("ips") * 35 >= 50 && s.count("re") * 55 >= 50);
    assert!(s.count("ips") + s.count("re") < 5);
    assert!(s
        .events("scaler")
        .iter()
        .any(|e| e.reason.starts_with("load halved")));
}

#[test]
fn a_scaler_is_capped_by_placement_with_an_event() {
    // ips may not share a host, and there are three: it cannot pass 3.
    let mut s = Sim::new(&SPEC.replace(
        "ips: { type: middlebox, function: monitor, instances: 2 }",
        "ips: { type: middlebox, function: monitor, instances: 2, anti_affinity: required }",
    ));
    s.ok(
        "PUT",
        "/v1/tenants/t/chains/ab/scaling",
        r#"{"strategy": "greedy", "direction": "higher", "metric": "reported",
            "metric_interval_ms": 1000, "improve": 0.1, "trigger": 0.25, "sustain_ms": 3000,
            "window_ms": 5000, "settle": 0.2, "cooldown_ms": 20000, "budget": 10,
            "target": 200.0}"#,
    );
    for _ in 0..200 {
        s.now += Duration::from_secs(1);
        let counts: BTreeMap<String, u32> = [("ips", s.count("ips")), ("re", s.count("re"))]
            .map(|(m, n)| (m.to_string(), n))
            .into();
        let value = throughput(&counts, 200.0);
        s.ok(
            "POST",
            "/v1/tenants/t/chains/ab/metrics",
            &format!(r#"{{"value": {value}}}"#),
        );
        assert!(s.count("ips") <= 3, "ips placed beyond its hosts");
    }
    assert_eq!(s.count("ips"), 3, "the scaler did add ips up to the cap");
    let refused: Vec<String> = s
        .events("error")
        .into_iter()
        .map(|e| e.reason)
        .filter(|r| r.contains("not carried out"))
        .collect();
    assert!(
        refused.iter().any(
            |r| r.contains("middlebox `ips` of tenant `t` needs 1 new instance")
                && r.contains("anti-affinity: required")
        ),
        "{refused:#?}"
    );
}

#[test]
fn a_scaler_follows_the_handshake_time_the_agents_measure() {
    let mut s = Sim::new(SPEC);
    let vni = s.r.desired().tenants["t"].vni;
    let bad = s
        .call(
            "PUT",
            "/v1/tenants/t/chains/ab/scaling",
            r#"{"metric": "handshake_ms", "direction": "higher"}"#,
        )
        .unwrap_err();
    assert!(
        bad.msg.contains("direction") && bad.msg.contains("handshake_ms"),
        "{bad}"
    );
    s.ok(
        "PUT",
        "/v1/tenants/t/chains/ab/scaling",
        r#"{"strategy": "greedy", "metric": "handshake_ms", "metric_interval_ms": 100,
            "improve": 0.1, "trigger": 0.25, "sustain_ms": 300, "window_ms": 1000,
            "settle": 0.2, "cooldown_ms": 60000, "budget": 10, "target": 12.0}"#,
    );
    let e = s
        .call(
            "POST",
            "/v1/tenants/t/chains/ab/metrics",
            r#"{"value": 1.0}"#,
        )
        .unwrap_err();
    assert!(e.msg.contains("agents measure"), "{e}");
    // Host 1 measures 20 handshakes per 50 ms, each as slow as the slower
    // middlebox makes it (30 ms / re instances, 20 ms / ips instances).
    let mut m = ChainMeasure {
        vni,
        chain: 0,
        ..ChainMeasure::default()
    };
    let mut sampled = false;
    for _ in 0..400 {
        let ms = (30.0 / s.count("re") as f64).max(20.0 / s.count("ips") as f64);
        m.syns += 20;
        m.handshakes += 20;
        m.handshake_ns += (20.0 * ms * 1e6) as u64;
        m.bytes += 20 * 600;
        s.beat_with(1, None, vec![m.clone()]);
        s.run(50 * MS);
        let v = s.ok("GET", "/v1/tenants/t/chains/ab/scaling", "");
        sampled |= v["measured"]["value"]
            .as_f64()
            .is_some_and(|v| (v - 30.0).abs() < 0.5);
    }
    assert!(sampled, "the agents' handshake time was sampled");
    assert_eq!(s.count("re"), 3, "re is the bottleneck until 3 instances");
    assert_eq!(s.count("ips"), 2);
    assert!(s
        .events("scale")
        .iter()
        .any(|e| e.reason.contains("add re")));
}

#[test]
fn a_cached_middlebox_gets_leases_once_every_agent_runs_its_split() {
    let spec = SPEC.replace(
        "ips: { type: middlebox, function: monitor, instances: 2 }",
        "ips: { type: middlebox, function: monitor, instances: 2, state: cached }",
    );
    let mut s = Sim::new(&spec);
    let leases = |s: &Sim| -> usize {
        s.r.configs()
            .values()
            .flat_map(|c| c.group_policies.iter())
            .filter(|g| g.cached && g.lease_epoch != 0)
            .count()
    };
    // Agents that never confirm the split: no lease, however long.
    s.run(Duration::from_secs(2));
    assert_eq!(leases(&s), 0);
    // Once every agent runs it (and keeps running it), leases go out.
    s.push_all();
    for _ in 0..40 {
        for h in 1..=3 {
            s.beat(h, None);
        }
        s.run(50 * MS);
        s.push_all();
    }
    assert!(leases(&s) > 0, "leases granted");
    let granted_version = s.r.configs()[&2].version;
    // Scaling the leased middlebox revokes first: the next version holds the
    // old split without leases, and the new split waits for the agents.
    s.ok(
        "PUT",
        "/v1/tenants/t/middleboxes/ips",
        r#"{"instances": 3}"#,
    );
    assert!(s.r.configs()[&2].version > granted_version);
    assert_eq!(leases(&s), 0, "revoked before the split changes");
    assert!(
        !s.in_any_group("t/ips/2"),
        "the new instance waits for the barrier"
    );
    for _ in 0..40 {
        for h in 1..=3 {
            s.beat(h, None);
        }
        s.run(50 * MS);
        s.push_all();
    }
    assert!(
        s.in_any_group("t/ips/2"),
        "the new split follows the confirmations"
    );
}

/// The tenant's generation and its instances, as the API shows them.
fn snapshot(s: &mut Sim) -> (serde_json::Value, serde_json::Value) {
    let t = s.ok("GET", "/v1/tenants/t", "");
    (t["generation"].clone(), t["instances"].clone())
}

#[test]
fn a_stale_apply_is_refused_with_what_changed_and_changes_nothing() {
    let mut s = Sim::new(SPEC);
    let edited = SPEC.replace("instances: 2", "instances: 3");
    // Applied against generation 1: fine, now at 2.
    let v = match s.call_if("PUT", "/v1/tenants/t", &edited, "\"1\"") {
        Ok(Reply::Json(200, v)) => v,
        other => panic!("{other:?}"),
    };
    assert_eq!(v["generation"], 2);
    assert!(v["plan"]["spec"][0]
        .as_str()
        .unwrap()
        .contains("middlebox ips"));
    let before = snapshot(&mut s);
    // A second editor still holds generation 1.
    let e = s
        .call_if("PUT", "/v1/tenants/t", SPEC, "1")
        .expect_err("stale apply accepted");
    assert_eq!(e.status, 409, "{e}");
    assert!(e.msg.contains("generation 2, not 1"), "{e}");
    assert!(e.msg.contains("apply tenant t by tester"), "{e}");
    assert!(e.msg.contains("~ middlebox ips"), "{e}");
    // The same, as the problem's extension members.
    assert_eq!(e.ext["generation"], 2);
    assert!(e.ext["recent_changes"][0]
        .as_str()
        .unwrap()
        .starts_with("apply tenant t by tester"));
    assert_eq!(e.problem(None)["recent_changes"], e.ext["recent_changes"]);
    assert_eq!(snapshot(&mut s), before);
    // Creating over an existing tenant with If-Match 0 is refused too.
    let e = s.call_if("POST", "/v1/tenants", SPEC, "0").unwrap_err();
    assert_eq!(e.status, 409);
    // A delete against a stale generation, likewise.
    let e = s.call_if("DELETE", "/v1/tenants/t", "", "1").unwrap_err();
    assert_eq!(e.status, 409);
    assert_eq!(snapshot(&mut s), before);
    // Garbage in If-Match is a 400 naming the header.
    let e = s.call_if("PUT", "/v1/tenants/t", SPEC, "soon").unwrap_err();
    assert_eq!(e.status, 400);
    assert!(e.msg.contains("If-Match"), "{e}");
}

#[test]
fn a_dry_run_says_what_would_change_and_changes_nothing() {
    let mut s = Sim::new(SPEC);
    s.push_all();
    let before = snapshot(&mut s);
    let edited = SPEC.replace("instances: 2", "instances: 3");
    let v = s.ok("PUT", "/v1/tenants/t?dry_run=true", &edited);
    assert_eq!(v["dry_run"], true);
    let p = &v["plan"];
    assert_eq!(p["generation_before"], 1);
    assert_eq!(p["generation_after"], 2);
    assert_eq!(p["instances_added"].as_array().unwrap().len(), 1, "{p}");
    assert!(p["instances_added"][0]
        .as_str()
        .unwrap()
        .starts_with("t/ips/2@"));
    assert!(!p["fib"].as_object().unwrap().is_empty(), "{p}");
    assert_eq!(snapshot(&mut s), before);
    assert!(s.r.take_effects().pushes.is_empty(), "a dry run pushed");
    // Not in the audit log either: only changes are.
    let logged = |s: &mut Sim| s.ok("GET", "/v1/audit", "").as_array().unwrap().len();
    let n = logged(&mut s);
    s.ok("PUT", "/v1/tenants/t?dry_run=true", &edited);
    assert_eq!(logged(&mut s), n);
    // A dry-run delete lists every instance and entry it would remove.
    let v = s.ok("DELETE", "/v1/tenants/t?dry_run=1", "");
    assert_eq!(v["plan"]["instances_removed"].as_array().unwrap().len(), 3);
    assert_eq!(v["plan"]["generation_after"], 0);
    assert_eq!(snapshot(&mut s), before);
}

#[test]
fn removing_every_chain_or_instance_needs_force() {
    let mut s = Sim::new(SPEC);
    let before = snapshot(&mut s);
    let empty = "tenant: t\nelements: {}\nchains: []\n";
    let e = s.call("PUT", "/v1/tenants/t", empty).unwrap_err();
    assert_eq!(e.status, 409, "{e}");
    assert!(e.msg.contains("removes every chain"), "{e}");
    assert!(e.msg.contains("force"), "{e}");
    // What it would have done comes with the refusal.
    assert!(e.ext["plan"]["spec"]
        .as_array()
        .unwrap()
        .iter()
        .any(|l| l.as_str().unwrap().starts_with("- chain")));
    assert_eq!(snapshot(&mut s), before);
    // No middlebox left on the path: every instance goes.
    let direct = "tenant: t
elements:
  a: { type: service, vms: { a1: 10.0.0.1 } }
  b: { type: service, vms: { b1: 10.0.0.2 } }
chains:
  - { name: ab, path: [a, b] }
";
    let e = s.call("PUT", "/v1/tenants/t", direct).unwrap_err();
    assert!(e.msg.contains("every NF instance"), "{e}");
    assert_eq!(snapshot(&mut s), before);
    let v = s.ok("PUT", "/v1/tenants/t?force=true", direct);
    assert_eq!(v["instances"].as_array().unwrap().len(), 0);
    assert_eq!(v["plan"]["instances_removed"].as_array().unwrap().len(), 3);
}

#[test]
fn every_change_request_is_audited_with_who_what_and_the_outcome() {
    let mut s = Sim::new(SPEC);
    let edited = SPEC.replace("instances: 2", "instances: 3");
    s.call_if("PUT", "/v1/tenants/t", &edited, "1").unwrap();
    s.call_if("PUT", "/v1/tenants/t", SPEC, "1").unwrap_err();
    s.ok("GET", "/v1/tenants/t", "");
    s.call_if("DELETE", "/v1/tenants/t", "", "2").unwrap();
    let log: Vec<crate::audit::AuditEntry> =
        serde_json::from_value(s.ok("GET", "/v1/audit?tenant=t", "")).unwrap();
    let rows: Vec<(&str, &str, u16)> = log
        .iter()
        .map(|e| (e.actor.as_str(), e.action.as_str(), e.status))
        .collect();
    assert_eq!(
        rows,
        [
            ("anonymous", "register vm t/a1 on host 1", 201),
            ("anonymous", "register vm t/b1 on host 3", 201),
            ("anonymous", "apply tenant t", 201),
            ("tester", "apply tenant t", 200),
            ("tester", "apply tenant t", 409),
            ("tester", "delete tenant t", 200),
        ]
    );
    assert!(
        log[3].changes.iter().any(|c| c == "~ middlebox ips"),
        "{:?}",
        log[3]
    );
    assert!(log[3]
        .changes
        .iter()
        .any(|c| c.starts_with("+ instance t/ips/2@")));
    assert!(log[4].changes[0].contains("generation 2, not 1"));
    assert!(log[5].changes.iter().any(|c| c == "- chain ab"));
    assert!(log.iter().all(|e| e.at_ms >= EPOCH_MS));
    assert!(log.windows(2).all(|w| w[0].seq < w[1].seq));
    // Paging: after a sequence number, and the newest few.
    let after: Vec<crate::audit::AuditEntry> =
        serde_json::from_value(s.ok("GET", &format!("/v1/audit?since={}", log[4].seq), ""))
            .unwrap();
    assert_eq!(after, log[5..]);
    let last2: Vec<crate::audit::AuditEntry> =
        serde_json::from_value(s.ok("GET", "/v1/audit?limit=2", "")).unwrap();
    assert_eq!(last2, log[4..]);
    assert_eq!(
        s.call("GET", "/v1/audit?since=x", "").unwrap_err().status,
        400
    );
}

#[test]
fn fabric_keys_reach_every_host_survive_a_restart_and_rotate_in_two_steps() {
    let mut s = Sim::new(SPEC);
    assert!(s.r.configs().values().all(|c| c.fabric_auth.is_none()));
    s.r.set_fabric_auth(true, [5; 32], s.now).unwrap();
    let keys = |s: &Sim, h: u32| s.r.configs()[&h].fabric_auth.clone().unwrap();
    let k1 = keys(&s, 1);
    assert_eq!(k1.peers.len(), 2, "hosts 2 and 3");
    assert!(!s.r.take_effects().pushes.is_empty(), "new keys are pushed");
    // Host 1's key to 3 is host 3's key from 1.
    let to3 = &k1.peers.iter().find(|p| p.host == 3).unwrap().tx;
    let k3 = keys(&s, 3);
    let from1 = &k3.peers.iter().find(|p| p.host == 1).unwrap().rx[0];
    assert_eq!(to3, from1);

    // A restart keeps the secret (a fresh one offered is not taken).
    let mut r = Reconciler::start(Box::new(s.store.clone()), "local", s.now, EPOCH_MS).unwrap();
    r.set_fabric_auth(true, [6; 32], s.now).unwrap();
    assert_eq!(r.configs()[&1].fabric_auth, Some(k1.clone()));

    // Rotation: accepted everywhere first, sealed with after.
    assert!(r.rotate_fabric_key([7; 32], s.now).unwrap().rotating);
    let mid = r.configs()[&1].fabric_auth.clone().unwrap();
    assert_eq!(mid.peers[0].tx, k1.peers[0].tx);
    assert_eq!(mid.peers[0].rx.len(), 2);
    let r2 = Reconciler::start(Box::new(s.store.clone()), "local", s.now, EPOCH_MS).unwrap();
    assert_eq!(
        r2.configs()[&1].fabric_auth,
        Some(mid.clone()),
        "stored mid-rotation"
    );
    r.finish_fabric_rotation(s.now).unwrap();
    let after = r.configs()[&1].fabric_auth.clone().unwrap();
    assert_eq!(after.peers[0].tx.id, 2);
    assert_eq!(after.peers[0].rx, vec![mid.peers[0].rx[0].clone()]);

    // Off: no keys anywhere.
    r.set_fabric_auth(false, [0; 32], s.now).unwrap();
    assert!(r.configs().values().all(|c| c.fabric_auth.is_none()));
}

/// `POST /v1/fabric/rotate` through the API: hosts first accept both keys,
/// and seal with the new one only once every live host runs that
/// configuration; a second rotation meanwhile, or one without sealing, is
/// refused; a silent host is not waited for.
#[test]
fn a_fabric_rotation_finishes_once_every_live_host_holds_the_new_key() {
    let mut s = Sim::new(SPEC);
    let rotate = |s: &mut Sim, secret: u8| {
        let a = resources::parse(&Request {
            method: "POST",
            url: "/v1/fabric/rotate",
            content_type: None,
            body: "",
            if_match: None,
        })
        .unwrap();
        let a = match a {
            crate::resources::Action::Host(crate::resources::hosts::HostAction::RotateFabric(
                _,
            )) => {
                crate::resources::Action::Host(crate::resources::hosts::HostAction::RotateFabric(
                    crate::resources::hosts::FreshSecret(Some([secret; 32])),
                ))
            }
            other => panic!("parsed as {other:?}"),
        };
        crate::executor::execute_as(&mut s.r, a, "ops", s.now)
    };
    let e = rotate(&mut s, 1).unwrap_err();
    assert_eq!(e.status, 409, "nothing to rotate without sealing: {e}");

    s.r.set_fabric_auth(true, [5; 32], s.now).unwrap();
    s.push_all();
    for h in 1..=3 {
        s.beat(h, None);
    }
    let status = s.ok("GET", "/v1/fabric", "");
    assert_eq!(status["sending"], 1);
    assert_eq!(status["rotating"], false);

    match rotate(&mut s, 9).unwrap() {
        Reply::Json(202, v) => {
            assert_eq!(v["rotating"], true);
            assert_eq!(v["keys"], serde_json::json!([1, 2]));
            assert_eq!(v["waiting_for"], serde_json::json!([1, 2, 3]));
        }
        other => panic!("{other:?}"),
    }
    assert!(!format!("{:?}", s.r.desired().fabric).contains("9, 9"));
    let e = rotate(&mut s, 10).unwrap_err();
    assert_eq!(e.status, 409, "{e}");
    assert!(e.to_string().contains("under way"), "{e}");
    // Pushed but not yet reported: still sealing with the old key.
    s.push_all();
    s.run(40 * MS);
    let cfg = |s: &Sim| s.r.configs()[&1].fabric_auth.clone().unwrap();
    assert_eq!(cfg(&s).peers[0].tx.id, 1);
    assert_eq!(cfg(&s).peers[0].rx.len(), 2);
    // Hosts 1 and 2 report the new version; host 3 has not yet.
    s.beat(1, None);
    s.beat(2, None);
    s.run(40 * MS);
    assert_eq!(
        s.ok("GET", "/v1/fabric", "")["waiting_for"],
        serde_json::json!([3])
    );
    assert_eq!(cfg(&s).peers[0].tx.id, 1, "host 3 may not hold key 2 yet");
    s.beat(3, None);
    s.run(40 * MS);
    let done = s.ok("GET", "/v1/fabric", "");
    assert_eq!(done["sending"], 2, "{done}");
    assert_eq!(done["keys"], serde_json::json!([2]));
    assert_eq!(cfg(&s).peers[0].tx.id, 2);
    assert_eq!(cfg(&s).peers[0].rx.len(), 1);
    let events = s.ok("GET", "/v1/events", "");
    let reasons: Vec<String> = events
        .as_array()
        .or_else(|| events["events"].as_array())
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "fabric")
        .map(|e| e["reason"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(reasons[1].contains("seal with key 2"), "{reasons:?}");
    let audit = s.ok("GET", "/v1/audit", "");
    assert!(
        audit.to_string().contains("rotation of the fabric"),
        "{audit}"
    );

    // A host gone silent is not waited for (it is as good as down). Hosts
    // that report health are watched for silence.
    s.push_all();
    for h in 1..=3 {
        s.beat(h, Some(Vec::new()));
    }
    rotate(&mut s, 11).unwrap();
    s.push_all();
    s.beat(1, Some(Vec::new()));
    s.beat(2, Some(Vec::new()));
    s.run(40 * MS);
    assert_eq!(
        s.ok("GET", "/v1/fabric", "")["sending"],
        2,
        "host 3 still heard from"
    );
    for _ in 0..25 {
        s.run(20 * MS);
        s.push_all();
        s.beat(1, Some(Vec::new()));
        s.beat(2, Some(Vec::new()));
    }
    assert_eq!(
        s.ok("GET", "/v1/fabric", "")["sending"],
        3,
        "host 3 silent for 500 ms"
    );
}

/// The same tenant in the `sluice.dev/v1` format: re-applying it changes no
/// placement, and its labels are listed; an unknown version is a 400 naming it.
#[test]
fn a_v1_spec_applies_like_the_flat_one_and_shows_its_labels() {
    let mut s = Sim::new(SPEC);
    s.push_all();
    let before = s.ok("GET", "/v1/tenants/t", "");
    let body: String = SPEC.lines().skip(1).map(|l| format!("  {l}\n")).collect();
    let v1 = format!(
        "apiVersion: sluice.dev/v1\nkind: Tenant\nmetadata:\n  name: t\n  labels: {{ team: edge }}\nspec:\n{body}"
    );
    let v = s.ok("PUT", "/v1/tenants/t", &v1);
    assert_eq!(v["plan"]["instances_added"], serde_json::json!([]), "{v}");
    assert_eq!(v["plan"]["instances_removed"], serde_json::json!([]), "{v}");
    let after = s.ok("GET", "/v1/tenants/t", "");
    assert_eq!(after["labels"]["team"], "edge");
    assert_eq!(after["instances"], before["instances"]);
    assert!(before.get("labels").is_none(), "{before}");
    let e = s
        .call(
            "PUT",
            "/v1/tenants/t",
            &v1.replace("sluice.dev/v1", "sluice.dev/v2"),
        )
        .unwrap_err();
    assert_eq!(e.status, 400);
    assert!(
        e.msg
            .contains("`sluice.dev/v2` is not supported (supported: sluice.dev/v1)"),
        "{e}"
    );
}

/// The block entries of every host's configuration: (host, entry id, src, dst).
fn block_entries(r: &Reconciler) -> Vec<(u32, u64, String, String)> {
    let mut out = Vec::new();
    for (h, c) in r.configs() {
        for t in &c.tenants {
            for e in t
                .entries
                .iter()
                .filter(|e| e.actions == [sluice_switch::Action::Block])
            {
                out.push((
                    *h,
                    e.id,
                    e.m.src.map(|p| p.to_string()).unwrap_or_default(),
                    e.m.dst.map(|p| p.to_string()).unwrap_or_default(),
                ));
            }
        }
    }
    out
}

#[test]
fn a_block_reaches_every_host_of_the_tenant_and_outlives_reapplies_and_restarts() {
    let mut s = Sim::new(SPEC);
    let tenant_hosts: Vec<u32> =
        s.r.configs()
            .iter()
            .filter(|(_, c)| c.tenants.iter().any(|t| t.tenant == "t"))
            .map(|(h, _)| *h)
            .collect();
    let v = s.ok("POST", "/v1/tenants/t/blocks", r#"{"vm":"b1","from":"a1"}"#);
    let id = v["id"].as_u64().unwrap();
    let entry = crate::blocks::BLOCK_ENTRY_BASE + id;
    let want: Vec<(u32, u64, String, String)> = tenant_hosts
        .iter()
        .map(|&h| (h, entry, "10.0.0.1/32".into(), "10.0.0.2/32".into()))
        .collect();
    assert!(tenant_hosts.len() >= 2, "{tenant_hosts:?}");
    assert_eq!(block_entries(&s.r), want);
    // The same source by address is the same block: nothing changes.
    let before = s.r.configs().clone();
    let again = s.ok(
        "POST",
        "/v1/tenants/t/blocks",
        r#"{"vm":"b1","from":"10.0.0.1/32"}"#,
    );
    assert_eq!(again["id"].as_u64(), Some(id));
    assert_eq!(s.r.configs(), &before);
    // A re-applied spec (more instances: new hosts maybe) keeps the block
    // on every host of the tenant.
    s.ok(
        "PUT",
        "/v1/tenants/t",
        &SPEC.replace("instances: 2", "instances: 3"),
    );
    let hosts: Vec<u32> = block_entries(&s.r).iter().map(|e| e.0).collect();
    let now_tenant: Vec<u32> =
        s.r.configs()
            .iter()
            .filter(|(_, c)| c.tenants.iter().any(|t| t.tenant == "t"))
            .map(|(h, _)| *h)
            .collect();
    assert_eq!(hosts, now_tenant);
    // A restart from the store keeps it, with the same entry id.
    let r2 = Reconciler::start(Box::new(s.store.clone()), "local", s.now, EPOCH_MS).unwrap();
    assert_eq!(block_entries(&r2), block_entries(&s.r));
    assert_eq!(r2.blocks("t").unwrap().len(), 1);
    // Removed: gone everywhere; the next block gets a new id.
    s.ok("DELETE", &format!("/v1/tenants/t/blocks/{id}"), "");
    assert!(block_entries(&s.r).is_empty());
    let v = s.ok("POST", "/v1/tenants/t/blocks", r#"{"vm":"a1","from":"b1"}"#);
    assert!(v["id"].as_u64().unwrap() > id);
}

impl Sim {
    /// Host `h` heartbeats accusing `accused`.
    fn accuse(&mut self, h: u32, accused: &[u32]) {
        let mut hb = self.heartbeat_of(h);
        hb.accusations = accused
            .iter()
            .map(|&a| sluice_proto::Accusation {
                host: a,
                rate_bps: 200_000_000,
                allowance_bps: 15_000_000,
                congested_periods: 50,
                age_ms: 0,
            })
            .collect();
        let beat = Heartbeat {
            hb,
            pinned: None,
            reports_health: false,
        };
        self.r.heartbeat(beat, self.now).unwrap();
    }
}

/// Seawall §4: a host accused by `f` = 2 distinct hosts is contained: it is
/// nobody's peer, has no peer itself, takes no instance, and its instances
/// are placed on other hosts. Before that, one accuser changes nothing.
#[test]
fn a_host_accused_by_two_hosts_is_contained_and_its_instances_move() {
    let mut s = Sim::new(SPEC);
    s.beat(4, None);
    let victim = s.r.desired().instances.values().next().unwrap().host;
    let on_victim = |s: &Sim| {
        s.r.desired()
            .instances
            .values()
            .filter(|i| i.host == victim)
            .count()
    };
    assert!(on_victim(&s) > 0);
    let n = s.r.desired().instances.len();
    let others: Vec<u32> = (1..=4).filter(|h| *h != victim).collect();
    s.accuse(others[0], &[victim]);
    s.run(100 * MS);
    assert!(s.r.desired().contained.is_empty());
    assert_eq!(s.events("accusation").len(), 1);
    // The same accuser again adds nothing; a second one contains.
    s.accuse(others[0], &[victim]);
    assert!(s.r.desired().contained.is_empty());
    s.accuse(others[1], &[victim]);
    assert!(s.r.desired().contained.contains(&victim));
    assert_eq!(on_victim(&s), 0, "its instances left it");
    assert_eq!(s.r.desired().instances.len(), n, "and were placed again");
    for (h, cfg) in s.r.configs() {
        let peers: Vec<u32> = cfg.peers.iter().map(|p| p.host).collect();
        if *h == victim {
            assert_eq!(peers, vec![victim]);
        } else {
            assert!(!peers.contains(&victim), "host {h} still peers with it");
        }
    }
    assert_eq!(s.events("contained").len(), 1);
    // An accusation not repeated goes after its time to live.
    s.run(ACCUSATION_TTL + 100 * MS);
    assert!(s.r.containment(s.now).accusations.is_empty());
    assert!(
        s.r.desired().contained.contains(&victim),
        "containment stays"
    );
    // Released by an operator: a peer again (new instances may go there).
    s.ok("DELETE", &format!("/v1/hosts/{victim}/containment"), "");
    assert!(s.r.desired().contained.is_empty());
    // Every other host is told to forget its own accusations of it; a
    // second release is a new generation.
    let pardons = |s: &Sim| -> Vec<(u32, Vec<sluice_proto::Pardon>)> {
        s.r.configs()
            .iter()
            .map(|(h, c)| (*h, c.pardons.clone()))
            .collect()
    };
    for (h, p) in pardons(&s) {
        let want = sluice_proto::Pardon {
            host: victim,
            generation: 1,
        };
        if h == victim {
            assert!(p.is_empty(), "a host is not told of its own release");
        } else {
            assert_eq!(p, vec![want], "host {h}");
        }
    }
    s.ok("DELETE", &format!("/v1/hosts/{victim}/containment"), "");
    assert!(pardons(&s)
        .iter()
        .filter(|(h, _)| *h != victim)
        .all(|(_, p)| p[0].generation == 2));
    let has_vm = s.r.desired().vms.values().any(|v| v.reg.host == victim);
    if has_vm {
        // Its VM's tenant spans other hosts again: they peer with it.
        assert!(s
            .r
            .configs()
            .values()
            .filter(|c| c.host != victim && !c.tenants.is_empty())
            .all(|c| c.peers.iter().any(|p| p.host == victim)));
    }
}

/// A single subverted host accusing an innocent one, even forever, never gets
/// it contained; a contained host's accusations count for nothing.
#[test]
fn one_accuser_never_contains_and_a_contained_host_cannot_accuse() {
    let mut s = Sim::new(SPEC);
    s.beat(4, None);
    for _ in 0..100 {
        s.accuse(4, &[1, 4]);
        s.run(50 * MS);
    }
    assert!(s.r.desired().contained.is_empty());
    // Host 4 gets contained by 2 and 3; its standing accusation of 1 then no
    // longer counts, so 1 accused by 4 and 2 is still not contained.
    s.accuse(2, &[4]);
    s.accuse(3, &[4]);
    assert!(s.r.desired().contained.contains(&4));
    s.accuse(4, &[1]);
    s.accuse(2, &[4, 1]);
    assert!(!s.r.desired().contained.contains(&1));
    let info = s.r.containment(s.now);
    let by4 = info.accusations.iter().find(|a| a.by == 4).unwrap();
    assert!(!by4.counts);
}

/// A host silent past the grace period is taken for dead: its instances are
/// placed again on the live hosts (a middlebox keeps its count), it takes no
/// new instance while silent, and once heard again it may take instances.
/// A host silent only briefly keeps its instances.
#[test]
fn a_host_dead_past_the_grace_period_has_its_instances_placed_elsewhere() {
    let mut s = Sim::new(SPEC);
    let dead = 2;
    let on = |s: &Sim, h: u32| {
        s.r.desired()
            .instances
            .values()
            .filter(|i| i.host == h)
            .count()
    };
    assert!(on(&s, dead) > 0, "host 2 runs instances");
    let n = s.r.desired().instances.len();
    // Every host reports health; host 2 then falls silent.
    let mut t = Duration::ZERO;
    while t < HOST_GRACE {
        for h in [1, 3] {
            s.beat(h, Some(Vec::new()));
        }
        if t < Duration::from_secs(1) {
            s.beat(dead, Some(Vec::new()));
        }
        s.run(50 * MS);
        t += 50 * MS;
        if t < HOST_GRACE - Duration::from_millis(500) {
            assert!(on(&s, dead) > 0, "silent {} ms: not yet", t.as_millis());
        }
    }
    for _ in 0..40 {
        for h in [1, 3] {
            s.beat(h, Some(Vec::new()));
        }
        s.run(50 * MS);
    }
    assert_eq!(on(&s, dead), 0, "its instances left it");
    assert_eq!(s.r.desired().instances.len(), n, "and were placed again");
    assert!(s.r.desired().evacuated.contains(&dead));
    let ev = s.events("evacuated");
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert!(ev[0].reason.contains("taken for dead"), "{}", ev[0].reason);
    assert!(s.r.desired().contained.is_empty(), "dead, not contained");
    // Heard again: it may take instances; nothing moves back by itself.
    s.beat(dead, Some(Vec::new()));
    assert!(s.r.desired().evacuated.is_empty());
    assert_eq!(on(&s, dead), 0);
    assert_eq!(s.events("evacuated").len(), 2);
}

/// The health report of host `h`: every instance on it healthy, `one` as given.
fn on_host(s: &Sim, h: u32, one: &InstanceHealth) -> Vec<InstanceHealth> {
    s.r.desired()
        .instances
        .iter()
        .filter(|(_, i)| i.host == h)
        .map(|((t, mb, k), _)| {
            let name = crate::desired::instance_name(t, mb, *k);
            if name == one.name {
                one.clone()
            } else {
                health(&name, true, false)
            }
        })
        .collect()
}

/// `GET /v1/traffic`: the chain's elements from the spec, a middlebox's
/// instance counts and rates from its instances' counters, and the chain's
/// packet and drop rates once a second from the agents' reports.
#[test]
fn traffic_draws_chains_from_the_spec_with_rates_from_heartbeats() {
    let mut s = Sim::new(SPEC);
    s.push_all();
    let vni = s.r.desired().tenants["t"].vni;
    let ips0 = "t/ips/0";
    let (ips0_host, _) = s.port(ips0);
    let mut m = ChainMeasure {
        vni,
        chain: 0,
        ..ChainMeasure::default()
    };
    let mut counts = health(ips0, true, false);
    // 1000 packets a second into the chain, 100 of them dropped at ips/0,
    // heartbeats every 100 ms.
    for _ in 0..30 {
        m.packets += 100;
        counts.rx_packets += 100;
        counts.tx_packets += 90;
        counts.drops += 6;
        counts.queue_drops += 4;
        for h in 1..=3 {
            let chains = if h == 1 { vec![m.clone()] } else { Vec::new() };
            s.beat_with(h, Some(on_host(&s, h, &counts)), chains);
        }
        s.run(100 * MS);
    }
    let v = s.ok("GET", "/v1/traffic", "");
    let chains: Vec<resources::traffic::ChainTraffic> = serde_json::from_value(v).unwrap();
    assert_eq!(chains.len(), 1);
    let c = &chains[0];
    assert_eq!((c.tenant.as_str(), c.chain.as_str()), ("t", "ab"));
    let kinds: Vec<(&str, &str)> = c
        .hops
        .iter()
        .map(|h| (h.name.as_str(), h.kind.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("a", "service"),
            ("ips", "middlebox"),
            ("re", "middlebox"),
            ("b", "service")
        ]
    );
    let ips = &c.hops[1];
    assert_eq!((ips.instances, ips.up), (Some(2), Some(2)));
    assert_eq!(ips.function.as_deref(), Some("monitor"));
    let r = ips.rates.unwrap();
    assert_eq!(
        (r.rx_per_s, r.tx_per_s, r.drops_per_s),
        (1000.0, 900.0, 100.0)
    );
    assert_eq!((c.packets_per_s, c.drops_per_s), (1000.0, 100.0));
    assert!(
        c.history.len() >= 2 && c.history.iter().all(|h| h.packets_per_s == 1000.0),
        "{:?}",
        c.history
    );
    // A poller asks for the samples after the last it has.
    let last = c.history.last().unwrap().at_ms;
    let v = s.ok("GET", &format!("/v1/traffic?since_ms={last}"), "");
    assert_eq!(v[0]["history"], serde_json::json!([]), "{v}");
    assert_eq!(
        v[0]["packets_per_s"], 1000.0,
        "the latest rates all the same"
    );
    let v = s.ok("GET", &format!("/v1/traffic?since_ms={}", last - 1), "");
    assert_eq!(v[0]["history"].as_array().unwrap().len(), 1, "{v}");
    // A dead instance is placed but not up.
    counts.alive = false;
    s.beat(ips0_host, Some(on_host(&s, ips0_host, &counts)));
    s.push_all();
    let v = s.ok("GET", "/v1/traffic", "");
    assert_eq!(v[0]["hops"][1]["up"], 1, "{v}");
    assert_eq!(v[0]["hops"][1]["instances"], 2, "{v}");
    // Traffic stopped: the next sample says so.
    for _ in 0..15 {
        for h in 1..=3 {
            s.beat(h, Some(on_host(&s, h, &counts)));
        }
        s.run(100 * MS);
    }
    let v = s.ok("GET", "/v1/traffic", "");
    assert_eq!(v[0]["packets_per_s"], 0.0, "{v}");
}

const LB_SPEC: &str = "tenant: t
elements:
  a: { type: service, vms: { a1: 10.0.0.1 } }
  b: { type: service, vms: { b1: 10.0.0.2, b2: 10.0.0.3 } }
  lb:
    type: middlebox
    function: lb
    config:
      services:
        - vip: 10.0.0.100
          port: 80
          backends: [{ addr: \"10.0.0.2\" }, { addr: \"10.0.0.3:8080\" }]
chains:
  - { name: ab, path: [a, lb, b] }
";

/// The backend states every instance of `t/lb` was given, as `addr state`.
fn lb_backends(s: &Sim) -> Vec<Vec<String>> {
    s.r.configs()
        .values()
        .flat_map(|c| c.instances.iter())
        .filter(|i| i.middlebox == "lb")
        .map(|i| {
            i.backends
                .iter()
                .map(|b| format!("{} {}", b.addr, b.state.as_str()))
                .collect()
        })
        .collect()
}

/// An LB spec on three hosts: backend b1 on host 3, b2 on host 2.
fn lb_sim() -> Sim {
    let mut s = Sim::new(SPEC);
    s.ok("PUT", "/v1/vms/t/b2", &vm("b2", 2, "10.0.0.3"));
    s.ok("PUT", "/v1/tenants/t", LB_SPEC);
    s.push_all();
    s
}

/// The motivating failure of issue 22: a backend's host dies. Its backend is
/// taken out of new connections as soon as the host is silent for
/// HOST_SILENT, in the configuration of every instance of the LB (which the
/// agents hand to the running processes), and back when the host is heard.
#[test]
fn a_backend_on_a_silent_host_is_down_until_the_host_is_heard_again() {
    let mut s = lb_sim();
    assert_eq!(lb_backends(&s), vec![Vec::<String>::new()], "all up");
    let lb_host = s.port("t/lb/0").0;
    let before = s.r.configs()[&lb_host].version;
    // Hosts 1 and 3 keep beating; host 2 (b2's) goes silent.
    let mut t = Duration::ZERO;
    while t < Duration::from_millis(600) {
        for h in [1, 3] {
            s.beat(h, Some(Vec::new()));
        }
        if t < Duration::from_millis(100) {
            s.beat(2, Some(Vec::new()));
        }
        s.run(20 * MS);
        t += 20 * MS;
        if t < Duration::from_millis(380) {
            assert_eq!(lb_backends(&s), vec![Vec::<String>::new()], "at {t:?}");
        }
    }
    assert_eq!(
        lb_backends(&s),
        vec![vec!["10.0.0.3:8080 down".to_string()]]
    );
    let ev = s.events("backend");
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert!(
        ev[0].reason.contains("10.0.0.3:8080: up -> down")
            && ev[0].reason.contains("host 2 silent"),
        "{}",
        ev[0].reason
    );
    assert_eq!(ev[0].host, Some(2));
    assert!(
        s.r.configs()[&lb_host].version > before,
        "pushed to the LB's host"
    );
    let infos = s.r.backend_infos(Some("t"), s.now);
    let b2 = infos.iter().find(|b| b.backend == "10.0.0.3:8080").unwrap();
    assert_eq!(
        (b2.state.as_str(), b2.host_down, b2.vm.as_deref()),
        ("down", true, Some("b2"))
    );
    // The metrics show it.
    let m = crate::metrics::render(&s.r, s.now, false);
    assert!(m.contains(
        "sluice_controller_backend_state{tenant=\"t\",middlebox=\"lb\",backend=\"10.0.0.3:8080\",state=\"down\"} 1"
    ), "{m}");
    assert!(m.contains("sluice_controller_backend_transitions_total{to=\"down\"} 1"));
    // Heard again: up at once.
    s.beat(2, Some(Vec::new()));
    s.run(20 * MS);
    assert_eq!(lb_backends(&s), vec![Vec::<String>::new()]);
    assert_eq!(s.events("backend").len(), 2);
}

/// When every watched host is silent at once the controller suspects itself:
/// no backend is taken down.
#[test]
fn no_backend_goes_down_when_every_host_is_silent() {
    let mut s = lb_sim();
    for h in 1..=3 {
        s.beat(h, Some(Vec::new()));
    }
    s.run(Duration::from_secs(2));
    assert_eq!(lb_backends(&s), vec![Vec::<String>::new()]);
    assert!(s.events("backend").is_empty());
}

/// A drain survives a controller restart with what is left of its delay: the
/// LB instances keep refusing the backend new connections, and it is removed
/// when the delay the operator gave runs out, not a new one.
#[test]
fn a_drain_resumes_after_a_restart_with_the_rest_of_its_delay() {
    let mut s = lb_sim();
    let url = "/v1/tenants/t/middleboxes/lb/backends/10.0.0.2/drain";
    s.ok("PUT", url, "{\"delay_ms\": 1000}");
    s.run(Duration::from_millis(400));
    let saved = s.store.saved().unwrap().0.backend_drains;
    assert_eq!(
        saved.len(),
        1,
        "the drain is in the stored state: {saved:?}"
    );
    // The controller restarts 400 ms into the drain.
    let unix_ms = s.r.unix_ms(s.now);
    s.r = Reconciler::start(Box::new(s.store.clone()), "local", s.now, unix_ms).unwrap();
    for h in 1..=3 {
        s.beat(h, None);
    }
    s.run(Duration::from_millis(40));
    assert_eq!(lb_backends(&s), vec![vec!["10.0.0.2 draining".to_string()]]);
    let v = s.ok("GET", "/v1/backends", "");
    assert!(v.to_string().contains("draining"), "{v}");
    // 1000 ms after the drain began (not 1000 ms after the restart).
    s.run(Duration::from_millis(600));
    assert_eq!(lb_backends(&s), vec![vec!["10.0.0.2 removed".to_string()]]);
    // A removed backend stays removed across another restart, until undrained.
    let unix_ms = s.r.unix_ms(s.now);
    s.r = Reconciler::start(Box::new(s.store.clone()), "local", s.now, unix_ms).unwrap();
    s.run(Duration::from_millis(40));
    assert_eq!(lb_backends(&s), vec![vec!["10.0.0.2 removed".to_string()]]);
    s.ok("DELETE", url, "");
    assert_eq!(lb_backends(&s), vec![Vec::<String>::new()]);
    assert!(s.store.saved().unwrap().0.backend_drains.is_empty());
}

#[test]
fn an_operator_drain_ends_in_removal_after_its_delay_and_undrain_restores_it() {
    let mut s = lb_sim();
    let url = "/v1/tenants/t/middleboxes/lb/backends/10.0.0.2/drain";
    let v = s.ok("PUT", url, "{\"delay_ms\": 1000}");
    assert_eq!(v[0]["state"], "draining", "{v}");
    assert_eq!(v[0]["backend"], "10.0.0.2");
    assert_eq!(lb_backends(&s), vec![vec!["10.0.0.2 draining".to_string()]]);
    s.run(Duration::from_millis(980));
    assert_eq!(lb_backends(&s), vec![vec!["10.0.0.2 draining".to_string()]]);
    s.run(Duration::from_millis(40));
    assert_eq!(lb_backends(&s), vec![vec!["10.0.0.2 removed".to_string()]]);
    let reasons: Vec<String> = s.events("backend").into_iter().map(|e| e.reason).collect();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(
        reasons[0].contains("drained by an operator"),
        "{}",
        reasons[0]
    );
    assert!(
        reasons[1].contains("deregistration delay passed"),
        "{}",
        reasons[1]
    );
    // An IP names the backend whatever its port; undrain brings it back.
    let v = s.ok(
        "DELETE",
        "/v1/tenants/t/middleboxes/lb/backends/10.0.0.3/drain",
        "",
    );
    assert_eq!(v[0]["state"], "up", "not drained: nothing changes");
    let v = s.ok("DELETE", url, "");
    assert_eq!(v[0]["state"], "up");
    assert_eq!(lb_backends(&s), vec![Vec::<String>::new()]);
    // Unknown names are 404s that say what is missing; a drain is audited.
    for (u, want) in [
        (
            "/v1/tenants/t/middleboxes/lb/backends/10.9.9.9/drain",
            "no backend `10.9.9.9`",
        ),
        (
            "/v1/tenants/t/middleboxes/a/backends/10.0.0.2/drain",
            "no load balancer `a`",
        ),
        (
            "/v1/tenants/x/middleboxes/lb/backends/10.0.0.2/drain",
            "tenant `x`",
        ),
    ] {
        let e = s.call("PUT", u, "").unwrap_err();
        assert_eq!(e.status, 404, "{u}");
        assert!(e.msg.contains(want), "{u}: {}", e.msg);
    }
    let e = s
        .call("PUT", url, "{\"delay_ms\": 99999999999}")
        .unwrap_err();
    assert_eq!(e.status, 400);
}

/// An operator drains a host for maintenance: its instances whose state is in
/// the store are placed on other hosts, `state: local` ones stay (moving them
/// would lose their connections) unless forced, it takes no new instance
/// until undrained, and the drain outlives the controller.
#[test]
fn a_drained_host_moves_its_shared_state_instances_and_takes_no_new_ones() {
    let mut s = Sim::new(&pinned_spec());
    s.push_all();
    let on = |s: &Sim, h: u32| -> Vec<String> {
        s.r.desired()
            .instances
            .iter()
            .filter(|(_, i)| i.host == h)
            .map(|((t, mb, k), _)| crate::desired::instance_name(t, mb, *k))
            .collect()
    };
    // Put a local-state instance next to the shared-state one, so the drain
    // has both kinds to deal with.
    let host = s.port("t/re/0").0;
    s.ok(
        "PUT",
        "/v1/tenants/t/middleboxes/ips",
        r#"{"instances": 6}"#,
    );
    let local_here: Vec<String> = on(&s, host)
        .into_iter()
        .filter(|n| n.starts_with("t/ips/"))
        .collect();
    assert!(!local_here.is_empty(), "{:?}", on(&s, host));

    let v = s.ok("PUT", &format!("/v1/hosts/{host}/drain"), "");
    let moved = v["moved"].as_array().unwrap();
    assert_eq!(moved.len(), 1, "{v}");
    assert_eq!(moved[0][0], "t/re/0");
    assert_ne!(moved[0][1], host);
    assert_ne!(s.port("t/re/0").0, host, "re/0 left the host");
    let kept: Vec<String> = serde_json::from_value(v["kept"].clone()).unwrap();
    assert_eq!(kept, local_here, "local state stays");
    assert!(on(&s, host).iter().all(|n| n.starts_with("t/ips/")));
    let ev = s.events("drained");
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert!(
        ev[0].reason.contains("kept (state: local"),
        "{}",
        ev[0].reason
    );
    let hosts = s.ok("GET", "/v1/hosts", "");
    let me = hosts
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["id"] == host)
        .unwrap();
    assert_eq!(me["drained"], true);

    // New instances go elsewhere.
    s.ok("PUT", "/v1/tenants/t/middleboxes/re", r#"{"instances": 4}"#);
    assert!(
        on(&s, host).iter().all(|n| !n.starts_with("t/re/")),
        "{:?}",
        on(&s, host)
    );

    // The drain outlives the controller.
    let r2 = Reconciler::start(Box::new(s.store.clone()), "local", s.now, EPOCH_MS).unwrap();
    assert!(r2.desired().cordoned.contains(&host));

    // Forced: the local-state instances move too; the host is empty.
    let v = s.ok(
        "PUT",
        &format!("/v1/hosts/{host}/drain"),
        r#"{"force": true}"#,
    );
    assert_eq!(
        v["moved"].as_array().unwrap().len(),
        local_here.len(),
        "{v}"
    );
    assert!(on(&s, host).is_empty(), "{:?}", on(&s, host));

    // Undrained: it may take instances again; nothing moves back.
    let v = s.ok("DELETE", &format!("/v1/hosts/{host}/drain"), "");
    assert_eq!(v["undrained"], true);
    assert!(s.r.desired().cordoned.is_empty());
    assert!(on(&s, host).is_empty());
    s.ok("PUT", "/v1/tenants/t/middleboxes/re", r#"{"instances": 8}"#);
    assert!(!on(&s, host).is_empty(), "it takes new instances again");
    let v = s.ok("DELETE", &format!("/v1/hosts/{host}/drain"), "");
    assert_eq!(v["undrained"], false, "not drained any more");
    assert_eq!(s.events("drained").len(), 3);
}

/// A drain that would leave instances without a host is refused and changes
/// nothing; bad requests name what is wrong.
#[test]
fn a_drain_without_room_elsewhere_is_refused() {
    let mut s = Sim::new(SPEC);
    s.ok("PUT", "/v1/hosts/1/drain", "");
    s.ok("PUT", "/v1/hosts/2/drain", "");
    let before = s.r.desired().clone();
    let e = s.call("PUT", "/v1/hosts/3/drain", "").unwrap_err();
    assert_eq!(e.status, 409, "{e}");
    assert!(e.to_string().contains("no room elsewhere"), "{e}");
    assert_eq!(s.r.desired(), &before, "nothing changed");
    let e = s.call("PUT", "/v1/hosts/9/drain", "").unwrap_err();
    assert_eq!(e.status, 404, "{e}");
    let e = s
        .call("PUT", "/v1/hosts/1/drain", r#"{"forse": true}"#)
        .unwrap_err();
    assert_eq!(e.status, 400, "{e}");
    assert!(e.to_string().contains("forse"), "{e}");
}

/// [`LB_SPEC`] with an active check on the service (fall 3, rise 2).
fn lb_checked_spec() -> String {
    let checked = LB_SPEC.replace(
        "10.0.0.3:8080\" }]\n",
        "10.0.0.3:8080\" }]\n          health_check: { interval_ms: 500, timeout_ms: 200 }\n",
    );
    assert_ne!(checked, LB_SPEC, "LB_SPEC changed shape");
    checked
}

impl Sim {
    /// Host `h` heartbeats with the check counters of backend `backend`.
    fn beat_checks(&mut self, h: u32, backend: &str, ok: u64, failed: u64, last: CheckOutcome) {
        let mut hb = self.heartbeat_of(h);
        hb.instances = Vec::new();
        hb.backend_checks = vec![sluice_proto::BackendCheck {
            tenant: "t".into(),
            middlebox: "lb".into(),
            backend: backend.into(),
            target: "tcp 10.0.0.3:8080".into(),
            ok,
            failed,
            last: Some(last),
        }];
        self.r
            .heartbeat(
                Heartbeat {
                    hb,
                    pinned: None,
                    reports_health: true,
                },
                self.now,
            )
            .unwrap();
    }
}

/// Each backend VM's host is told to check it, with the service's timing
/// and the backend's own port; hosts without a checked backend get nothing.
#[test]
fn the_agent_of_each_backends_host_is_told_to_check_it() {
    let mut s = Sim::new(SPEC);
    s.ok("PUT", "/v1/vms/t/b2", &vm("b2", 2, "10.0.0.3"));
    s.ok("PUT", "/v1/tenants/t", &lb_checked_spec());
    let cfgs = s.r.configs();
    let on2 = &cfgs[&2].health_checks;
    assert_eq!(on2.len(), 1, "{on2:?}");
    let c = &on2[0];
    assert_eq!(
        (
            c.backend.as_str(),
            c.addr,
            c.tcp_port,
            c.interval_ms,
            c.timeout_ms
        ),
        (
            "10.0.0.3:8080",
            std::net::Ipv4Addr::new(10, 0, 0, 3),
            8080,
            500,
            200
        )
    );
    let b2 = &s.r.desired().vms[&("t".to_string(), "b2".to_string())];
    assert_eq!(c.port, b2.port, "b2's port on host 2");
    assert_eq!(cfgs[&3].health_checks[0].backend, "10.0.0.2");
    assert_eq!(cfgs[&3].health_checks[0].tcp_port, 80);
    assert!(cfgs[&1].health_checks.is_empty());
    assert_eq!(c.http_path, None, "a tcp check");
    let http = lb_checked_spec().replace("interval_ms: 500", "proto: http, interval_ms: 500");
    s.ok("PUT", "/v1/tenants/t", &http);
    assert_eq!(
        s.r.configs()[&2].health_checks[0].http_path.as_deref(),
        Some("/")
    );
    // Without the check, no host checks anything.
    s.ok("PUT", "/v1/tenants/t", LB_SPEC);
    assert!(s.r.configs().values().all(|c| c.health_checks.is_empty()));
}

/// A bad `health_check:` is refused when the spec is applied, naming the field.
#[test]
fn a_bad_health_check_is_refused_at_apply() {
    let mut s = Sim::new(SPEC);
    let bad = lb_checked_spec().replace("timeout_ms: 200", "timeout_ms: 900");
    let e = s.call("PUT", "/v1/tenants/t", &bad).unwrap_err();
    assert!(
        e.msg
            .contains("health_check.timeout_ms 900 must be 1 to interval_ms (500)"),
        "{}",
        e.msg
    );
    let path = lb_checked_spec().replace("interval_ms: 500", "path: /x, interval_ms: 500");
    let e = s.call("PUT", "/v1/tenants/t", &path).unwrap_err();
    assert!(
        e.msg.contains("health_check.path needs proto: http"),
        "{}",
        e.msg
    );
}

/// The agent's results count against the thresholds: `fall` failures take
/// the backend down (an event with the reason, the LB's instances told),
/// `rise` passes bring it back; the first report is a baseline; a report
/// from a host the VM is not on is ignored.
#[test]
fn failed_checks_reported_by_the_agent_take_a_backend_down_and_passes_bring_it_back() {
    let mut s = Sim::new(SPEC);
    s.ok("PUT", "/v1/vms/t/b2", &vm("b2", 2, "10.0.0.3"));
    s.ok("PUT", "/v1/tenants/t", &lb_checked_spec());
    s.push_all();
    let b = "10.0.0.3:8080";
    // A baseline, whatever it holds.
    s.beat_checks(2, b, 10, 50, CheckOutcome::Refused);
    s.run(20 * MS);
    assert_eq!(
        lb_backends(&s),
        vec![Vec::<String>::new()],
        "a baseline only"
    );
    s.beat_checks(2, b, 10, 52, CheckOutcome::Refused);
    s.run(20 * MS);
    assert_eq!(lb_backends(&s), vec![Vec::<String>::new()], "two of three");
    // Host 3 cannot speak for b2 (on host 2).
    s.beat_checks(3, b, 0, 100, CheckOutcome::Refused);
    s.beat_checks(3, b, 0, 200, CheckOutcome::Refused);
    assert_eq!(lb_backends(&s), vec![Vec::<String>::new()]);
    s.beat_checks(2, b, 10, 53, CheckOutcome::Refused);
    s.run(20 * MS);
    assert_eq!(lb_backends(&s), vec![vec![format!("{b} down")]]);
    let ev = s.events("backend");
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert!(
        ev[0].reason.contains(
            "10.0.0.3:8080: up -> down: 3 health checks failed in a row (tcp 10.0.0.3:8080: RST)"
        ),
        "{}",
        ev[0].reason
    );
    let info = s.r.backend_infos(Some("t"), s.now);
    let i = info.iter().find(|x| x.backend == b).unwrap();
    assert_eq!(
        (i.state.as_str(), i.healthy, i.host_down),
        ("down", false, false)
    );
    assert_eq!(
        i.last_check.as_deref(),
        Some("tcp 10.0.0.3:8080: RST (ok 10, failed 53)")
    );
    // One pass is not enough; the second is, even with a time-out between
    // heartbeats (the last result goes last).
    s.beat_checks(2, b, 11, 53, CheckOutcome::Ok);
    assert_eq!(lb_backends(&s), vec![vec![format!("{b} down")]]);
    s.beat_checks(2, b, 12, 54, CheckOutcome::Ok);
    assert_eq!(
        lb_backends(&s),
        vec![vec![format!("{b} down")]],
        "a failure restarts the count"
    );
    s.beat_checks(2, b, 14, 54, CheckOutcome::Ok);
    assert_eq!(lb_backends(&s), vec![Vec::<String>::new()]);
    let ev = s.events("backend");
    assert!(ev
        .last()
        .unwrap()
        .reason
        .contains("down -> up: 2 health checks passed in a row"));
    // An agent that restarted counts from zero again.
    s.beat_checks(2, b, 0, 3, CheckOutcome::Timeout);
    assert_eq!(lb_backends(&s), vec![vec![format!("{b} down")]]);
    assert!(s
        .events("backend")
        .last()
        .unwrap()
        .reason
        .contains("(tcp 10.0.0.3:8080: timeout)"));
}

/// Taking the check out of the spec forgets its verdict: the backend is up.
#[test]
fn removing_the_health_check_brings_a_backend_it_held_down_back() {
    let mut s = Sim::new(SPEC);
    s.ok("PUT", "/v1/vms/t/b2", &vm("b2", 2, "10.0.0.3"));
    s.ok("PUT", "/v1/tenants/t", &lb_checked_spec());
    s.push_all();
    let b = "10.0.0.3:8080";
    s.beat_checks(2, b, 0, 0, CheckOutcome::Ok);
    s.beat_checks(2, b, 0, 3, CheckOutcome::Refused);
    assert_eq!(lb_backends(&s), vec![vec![format!("{b} down")]]);
    s.ok("PUT", "/v1/tenants/t", LB_SPEC);
    s.run(20 * MS);
    assert_eq!(lb_backends(&s), vec![Vec::<String>::new()]);
    assert!(s
        .events("backend")
        .last()
        .unwrap()
        .reason
        .contains("down -> up: its health check was removed"));
    // Reports for an unchecked backend change nothing.
    s.beat_checks(2, b, 0, 10, CheckOutcome::Refused);
    s.beat_checks(2, b, 0, 20, CheckOutcome::Refused);
    assert_eq!(lb_backends(&s), vec![Vec::<String>::new()]);
}

/// Every host beats at the version it runs (what an operator's drain waits
/// for).
fn beat_all(s: &mut Sim) {
    for h in 1..=3 {
        s.beat(h, None);
    }
}

/// Whether `name`'s host is told to run its process.
fn runs(s: &Sim, name: &str) -> bool {
    let (h, _) = s.port(name);
    s.r.configs()[&h].instances.iter().any(|i| i.name == name)
}

const IPS1: &str = "/v1/tenants/t/middleboxes/ips/instances/1/drain";

/// An operator drains one instance of a local-state (pinned) middlebox: no
/// new flows at once, its pinned flows continue on it, it is stopped (kept
/// placed, no process) once no host has a flow pinned to it, re-applying
/// the spec does not end the drain, and undraining starts it again.
#[test]
fn an_operator_drained_local_instance_stops_once_its_pinned_flows_end() {
    let mut s = Sim::new(&pinned_spec());
    s.push_all();
    beat_all(&mut s);
    let vni = s.r.desired().tenants["t"].vni;
    assert!(s.in_any_group("t/ips/1"));
    let v = s.ok("PUT", IPS1, r#"{"delay_ms": 5000}"#);
    assert_eq!(v["state"], "draining", "{v}");
    assert_eq!(v["state_mode"], "local");
    assert_eq!(v["drain_until_ms"], EPOCH_MS + 5000);
    assert!(!s.in_any_group("t/ips/1"), "no new flows to it");
    assert!(runs(&s, "t/ips/1"), "it keeps running for its pinned flows");
    let (ih, port) = s.port("t/ips/1");
    let own = Output::Port(PortId(port));
    assert!(
        s.r.configs()[&ih]
            .group_policies
            .iter()
            .any(|gp| gp.draining.contains(&own)),
        "its agent keeps its pinned flows on it"
    );
    assert!(s.events("drain")[0]
        .reason
        .contains("t/ips/1 drained by an operator"));
    let listed = s.ok("GET", "/v1/instances", "");
    assert!(listed.to_string().contains("\"draining\""), "{listed}");
    // Re-applying the spec leaves the operator's drain alone.
    s.ok("PUT", "/v1/tenants/t", &pinned_spec());
    assert!(s
        .r
        .desired()
        .draining
        .contains(&("t".into(), "ips".into(), 1)));
    s.push_all();
    beat_all(&mut s);
    s.run(20 * MS);
    let polls: Vec<u32> = s.r.take_effects().polls.keys().copied().collect();
    assert!(!polls.is_empty(), "the hosts pinning flows to it are asked");
    let report = |s: &mut Sim, flows: u64| {
        for h in &polls {
            let o = if *h == ih {
                own
            } else {
                Output::Host(HostId(ih))
            };
            let v = s.r.configs()[h].version;
            s.r.pinned_report(*h, v, vec![pinned(vni, o, flows)], s.now);
        }
    };
    report(&mut s, 3);
    s.run(20 * MS);
    assert!(runs(&s, "t/ips/1"), "flows still pinned: it stays");
    report(&mut s, 0);
    s.run(20 * MS);
    assert!(s.r.desired().stopped(&("t".into(), "ips".into(), 1)));
    assert!(!runs(&s, "t/ips/1"), "stopped: no process");
    assert!(
        !s.r.configs()[&ih].ports.iter().any(|p| p.id == port),
        "its port goes, as a removed instance's does"
    );
    assert_eq!(s.port("t/ips/1"), (ih, port), "it keeps its place");
    let ends: Vec<String> = s.events("drain").into_iter().map(|e| e.reason).collect();
    assert!(
        ends[1].contains("stopped after draining: no flow is pinned"),
        "{ends:?}"
    );
    let listed = s.ok("GET", "/v1/instances", "");
    assert!(listed.to_string().contains("\"stopped\""), "{listed}");
    let m = crate::metrics::render(&s.r, s.now, false);
    assert!(
        m.contains(
            "sluice_controller_instance_drain{tenant=\"t\",middlebox=\"ips\",instance=\"t/ips/1\",state=\"stopped\"} 1"
        ),
        "{m}"
    );
    // Draining it again changes nothing; undraining starts it again, and
    // it catches up (the other instance holds the pinned flows).
    let v = s.ok("PUT", IPS1, "");
    assert_eq!(
        (v["state"].as_str(), v["changed"].as_bool()),
        (Some("stopped"), Some(false))
    );
    let v = s.ok("DELETE", IPS1, "");
    assert_eq!(v["state"], "serving", "{v}");
    assert!(runs(&s, "t/ips/1") && s.in_any_group("t/ips/1"));
    assert!(s
        .r
        .desired()
        .catching_up
        .contains(&("t".into(), "ips".into(), 1)));
    assert!(s.r.desired().instance_drains.is_empty());
    assert!(s.events("drain")[2]
        .reason
        .contains("undrained by an operator (was stopped)"));
    let v = s.ok("DELETE", IPS1, "");
    assert_eq!(v["changed"], false, "not drained is no error");
    assert!(!crate::metrics::render(&s.r, s.now, false).contains("instance_drain{"));
}

/// A shared-state instance's flows can move with their state: it leaves its
/// groups at once and is stopped as soon as every host of its tenant runs
/// the configuration without it.
#[test]
fn an_operator_drained_shared_instance_stops_once_every_host_runs_without_it() {
    let mut s = Sim::new(SPEC);
    s.push_all();
    beat_all(&mut s);
    let v = s.ok("PUT", IPS1, "");
    assert_eq!(v["state_mode"], "shared");
    assert_eq!(v["drain_until_ms"], EPOCH_MS + 30_000, "the default delay");
    assert!(!s.in_any_group("t/ips/1"));
    // The hosts have not taken the new configuration yet.
    s.run(100 * MS);
    assert!(runs(&s, "t/ips/1"));
    s.push_all();
    beat_all(&mut s);
    s.run(20 * MS);
    assert!(!runs(&s, "t/ips/1"));
    let e = &s.events("drain")[1].reason;
    assert!(
        e.contains("every host of its tenant runs the configuration"),
        "{e}"
    );
    // Scaling in removes a stopped instance for good, with its drain.
    s.ok(
        "PUT",
        "/v1/tenants/t/middleboxes/ips",
        r#"{"instances": 1}"#,
    );
    assert!(s.r.desired().instance_by_name("t/ips/1").is_none());
    assert!(s.r.desired().instance_drains.is_empty());
}

/// A drain's delay bounds it, and survives a restart with what is left: a
/// controller restarted 400 ms into a 1000 ms drain stops the instance 1000
/// ms after the drain began, and a stopped instance stays stopped across
/// another restart.
#[test]
fn an_operator_drain_stops_at_its_delay_and_resumes_after_a_restart() {
    let mut s = Sim::new(&pinned_spec());
    s.push_all();
    s.ok("PUT", IPS1, r#"{"delay_ms": 1000}"#);
    s.run(400 * MS);
    let saved = s.store.saved().unwrap().0.instance_drains;
    assert_eq!(saved.len(), 1, "the drain is stored: {saved:?}");
    let unix_ms = s.r.unix_ms(s.now);
    s.r = Reconciler::start(Box::new(s.store.clone()), "local", s.now, unix_ms).unwrap();
    beat_all(&mut s);
    s.run(580 * MS);
    assert!(runs(&s, "t/ips/1"), "980 ms into the drain: still draining");
    s.run(40 * MS);
    assert!(!runs(&s, "t/ips/1"), "1000 ms after it began");
    let e = s.events("drain").last().unwrap().reason.clone();
    assert!(e.contains("delay passed"), "{e}");
    let unix_ms = s.r.unix_ms(s.now);
    s.r = Reconciler::start(Box::new(s.store.clone()), "local", s.now, unix_ms).unwrap();
    s.run(40 * MS);
    assert!(!runs(&s, "t/ips/1"), "still stopped after another restart");
    let listed = s.ok("GET", "/v1/instances", "");
    assert!(listed.to_string().contains("\"stopped\""), "{listed}");
}

/// The last instance of a middlebox taking new flows is drained only with
/// force; unknown names are 404s saying what is missing; every drain is in
/// the audit log.
#[test]
fn draining_the_last_instance_needs_force_and_unknown_names_are_404s() {
    let mut s = Sim::new(SPEC);
    let last = "/v1/tenants/t/middleboxes/re/instances/0/drain";
    let e = s.call("PUT", last, "").unwrap_err();
    assert_eq!(e.status, 409, "{e}");
    assert!(
        e.msg.contains("last instance of middlebox `t/re`"),
        "{}",
        e.msg
    );
    assert!(s.r.desired().instance_drains.is_empty(), "nothing changed");
    let v = s.ok("PUT", last, r#"{"force": true}"#);
    assert_eq!(v["state"], "draining");
    s.ok("PUT", "/v1/tenants/t/middleboxes/ips/instances/0/drain", "");
    let e = s.call("PUT", IPS1, "").unwrap_err();
    assert_eq!(e.status, 409, "ips/0 drains already: {e}");
    for (u, want) in [
        (
            "/v1/tenants/x/middleboxes/ips/instances/1/drain",
            "tenant `x`",
        ),
        (
            "/v1/tenants/t/middleboxes/nope/instances/1/drain",
            "no middlebox `nope`",
        ),
        (
            "/v1/tenants/t/middleboxes/ips/instances/7/drain",
            "`t/ips` has no instance 7 (it has: 0, 1)",
        ),
    ] {
        let e = s.call("PUT", u, "").unwrap_err();
        assert_eq!(e.status, 404, "{u}");
        assert!(e.msg.contains(want), "{u}: {}", e.msg);
    }
    for (body, url) in [
        (r#"{"delay_ms": 99999999999}"#, IPS1),
        (r#"{"delay": 5}"#, IPS1),
        ("", "/v1/tenants/t/middleboxes/ips/instances/one/drain"),
    ] {
        assert_eq!(
            s.call("PUT", url, body).unwrap_err().status,
            400,
            "{body} {url}"
        );
    }
    let log: Vec<crate::audit::AuditEntry> =
        serde_json::from_value(s.ok("GET", "/v1/audit?tenant=t", "")).unwrap();
    let drains: Vec<(&str, u16)> = log
        .iter()
        .filter(|e| e.action.starts_with("drain instance"))
        .map(|e| (e.action.as_str(), e.status))
        .collect();
    assert_eq!(
        drains,
        [
            ("drain instance t/re/0 (delay 30000 ms)", 409),
            ("drain instance t/re/0 (delay 30000 ms, forced)", 200),
            ("drain instance t/ips/0 (delay 30000 ms)", 200),
            ("drain instance t/ips/1 (delay 30000 ms)", 409),
            ("drain instance t/nope/1 (delay 30000 ms)", 404),
            ("drain instance t/ips/7 (delay 30000 ms)", 404),
        ]
    );
}

/// A cached middlebox's drain changes a leased split: the lease gate holds
/// it back (leases revoked first; the interim configuration keeps the old
/// split and the process), so the instance is stopped only with or after
/// the new split, never while a host's groups still send to it.
#[test]
fn an_operator_drained_cached_instance_waits_for_the_lease_gate() {
    let spec = SPEC.replace(
        "ips: { type: middlebox, function: monitor, instances: 2 }",
        "ips: { type: middlebox, function: monitor, instances: 2, state: cached }",
    );
    let mut s = Sim::new(&spec);
    let leased = |s: &Sim| {
        s.r.configs()
            .values()
            .flat_map(|c| c.group_policies.iter())
            .any(|g| g.cached && g.lease_epoch != 0)
    };
    s.push_all();
    for _ in 0..40 {
        beat_all(&mut s);
        s.run(50 * MS);
        s.push_all();
    }
    assert!(leased(&s), "leases granted");
    let v = s.ok("PUT", IPS1, "");
    assert_eq!(v["state_mode"], "cached");
    assert!(
        s.in_any_group("t/ips/1"),
        "held back: leases are revoked first"
    );
    let mut stopped_at = None;
    for i in 0..40 {
        beat_all(&mut s);
        s.run(50 * MS);
        assert!(
            runs(&s, "t/ips/1") || !s.in_any_group("t/ips/1"),
            "stopped while a group still sends to it"
        );
        if stopped_at.is_none() && !runs(&s, "t/ips/1") {
            stopped_at = Some(i);
        }
        // The agents answer polls for pinned flows (none: the group is not
        // pinned) at the version they run, and take their pushes.
        let fx = s.r.take_effects();
        for h in fx.polls.keys() {
            let v = s.running.get(h).copied().unwrap_or(0);
            s.r.pinned_report(*h, v, Vec::new(), s.now);
        }
        for h in fx.pushes.keys() {
            if let Some(job) = s.r.push_started(*h, s.now) {
                s.running.insert(*h, job.config.version);
                s.r.push_finished(*h, job.config.version, Ok(()), s.now);
            }
        }
    }
    assert!(
        stopped_at.is_some(),
        "stopped once the new split ran everywhere"
    );
    assert!(!s.in_any_group("t/ips/1"));
}

mod consolidation;
mod distribution;
