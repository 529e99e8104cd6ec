//! Local speculative failover (needs root and redis-server): two firewall
//! instances on one host share their state through a private Redis; a long TCP
//! transfer crosses one of them. Killing that instance (SIGKILL) moves the flow
//! to the other within a heartbeat timeout and the transfer completes intact;
//! the supervisor restarts the killed one, which rejoins. A paused instance
//! (SIGSTOP) is suspected and rejoins when continued, without a restart.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use sluice_agent::testing::{agent_status, attach_vm, is_root, standalone_options, VmHandle};
use sluice_agent::{Agent, AgentOptions};
use sluice_netns::Netns;
use sluice_proto::{
    AgentConfig, AgentStatus, InstanceConfig, InstanceHealth, PortConfig, PortKind, TenantFib,
};
use sluice_state_redis::server::RedisServer;
use sluice_switch::{Action, Entry, Group, GroupId, Match, Output, PortId, Prefix};

mod promtool;

const FWS: [u16; 2] = [5, 6];

const CHAIN: &str = r#"
name: t.fw
functions:
  - type: firewall
    name: fw
    rules: |
      allow tcp from 10.0.0.1 to 10.0.0.2 port 5000
      default deny
settings:
  batch_size: 32
  timer_interval_ms: 100
"#;

fn entry(id: u64, m: Match, actions: Vec<Action>) -> Entry {
    Entry {
        id,
        priority: 10,
        m,
        actions,
    }
}

/// VM 1 -> firewall group -> VM 2 on chain 1, the replies on chain 2; the
/// group splits flows between the two instances by hash.
fn config(vm1: &VmHandle, vm2: &VmHandle, state: &str) -> AgentConfig {
    let via_fw = |id, from: u16, dst: &str, chain| {
        entry(
            id,
            Match {
                in_port: Some(PortId(from)),
                dst: Some(Prefix::parse(dst).unwrap()),
                ..Match::default()
            },
            vec![
                Action::SetChainHop { chain, hop: 1 },
                Action::Select(GroupId(1)),
            ],
        )
    };
    let from_fw = |id, chain, to: u16| {
        entry(
            id,
            Match {
                chain_hop: Some((chain, 1)),
                ..Match::default()
            },
            vec![Action::Output(Output::Port(PortId(to)))],
        )
    };
    let mut ports = vec![
        PortConfig {
            id: 1,
            vni: 7,
            kind: vm1.port_kind(),
        },
        PortConfig {
            id: 2,
            vni: 7,
            kind: vm2.port_kind(),
        },
    ];
    let mut instances = Vec::new();
    for (k, port) in FWS.iter().enumerate() {
        let name = format!("t/fw/{k}");
        ports.push(PortConfig {
            id: *port,
            vni: 7,
            kind: PortKind::Instance { name: name.clone() },
        });
        instances.push(InstanceConfig {
            name,
            tenant: "t".into(),
            middlebox: "fw".into(),
            port: *port,
            vni: 7,
            chain_yaml: CHAIN.into(),
            state: state.into(),
            state_password: None,
            backends: Vec::new(),
        });
    }
    let group = Group::split(&FWS.map(|p| (Output::Port(PortId(p)), 1))).unwrap();
    AgentConfig {
        pardons: Vec::new(),
        health_checks: Vec::new(),
        version: 1,
        host: 1,
        peers: vec![],
        ports,
        tenants: vec![TenantFib {
            tenant: "t".into(),
            vni: 7,
            entries: vec![
                via_fw(1, 1, "10.0.0.2/32", 1),
                via_fw(2, 2, "10.0.0.1/32", 2),
                from_fw(3, 1, 2),
                from_fw(4, 2, 1),
            ],
            groups: vec![(1, group)],
            senders: None,
            sources: None,
            chains: Vec::new(),
        }],
        instances,
        group_policies: vec![],
        fabric_auth: None,
    }
}

fn health(s: &AgentStatus, port: u16) -> InstanceHealth {
    s.health.iter().find(|h| h.port == port).cloned().unwrap()
}

fn pid(s: &AgentStatus, port: u16) -> Option<u32> {
    s.instances
        .iter()
        .find(|i| i.port == port)
        .and_then(|i| i.pid)
}

/// Polls `url`'s status until `f` holds (panics after `secs`).
fn wait_for(url: &str, secs: u64, what: &str, f: impl Fn(&AgentStatus) -> bool) -> AgentStatus {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let s = agent_status(url);
        if f(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {s:#?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn echo_server(vm: &VmHandle, port: u16) {
    let addr = SocketAddr::from((vm.addr, port));
    let listener = vm.ns.run(move || TcpListener::bind(addr)).unwrap().unwrap();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { break };
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 65536];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 || s.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
}

/// A host with two VMs, a private Redis and an agent running two firewall
/// instances; everything is removed on drop.
struct Setup {
    agent: Option<Agent>,
    url: String,
    run_dir: std::path::PathBuf,
    vm1: VmHandle,
    vm2: VmHandle,
    _redis: RedisServer,
    _host: Netns,
}

impl Drop for Setup {
    fn drop(&mut self) {
        if let Some(a) = self.agent.take() {
            a.shutdown();
        }
        let _ = std::fs::remove_dir_all(&self.run_dir);
    }
}

static NEXT: AtomicU32 = AtomicU32::new(0);

fn setup() -> Option<Setup> {
    setup_with(1)
}

/// The same with `threads` forwarding threads.
fn setup_with(threads: usize) -> Option<Setup> {
    if !is_root() {
        eprintln!("skipped: needs root");
        return None;
    }
    if sluice_state_redis::server::server_binary().is_none() {
        eprintln!("skipped: no redis-server");
        return None;
    }
    let redis = RedisServer::start(&[]).unwrap();
    let host = Netns::new("h").unwrap();
    let vm1 = attach_vm(host.name(), "vm1", Ipv4Addr::new(10, 0, 0, 1)).unwrap();
    let vm2 = attach_vm(host.name(), "vm2", Ipv4Addr::new(10, 0, 0, 2)).unwrap();
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let prefix = format!("f{}{n}", std::process::id() % 100_000);
    let run_dir = std::env::temp_dir().join(format!("sluice-failover-{prefix}"));
    let agent = Agent::start(&AgentOptions {
        prefix,
        run_dir: Some(run_dir.clone()),
        instance_exe: Some(env!("CARGO_BIN_EXE_sluiced").into()),
        dataplane_threads: threads,
        ..standalone_options(1, host.name())
    })
    .unwrap();
    let url = agent.api_url();
    echo_server(&vm2, 5000);
    let r = ureq::put(&format!("{url}/v1/config")).send_json(config(&vm1, &vm2, &redis.url()));
    assert_eq!(r.map(|r| r.status()).ok(), Some(200));
    let s = Setup {
        agent: Some(agent),
        url,
        run_dir,
        vm1,
        vm2,
        _redis: redis,
        _host: host,
    };
    wait_for(&s.url, 20, "both instances heartbeating", |st| {
        FWS.iter().all(|p| {
            st.health
                .iter()
                .any(|h| h.port == *p && h.last_heartbeat_age_ms.is_some() && !h.suspected)
        })
    });
    Some(s)
}

/// Bytes of the transfer: a pattern that shows reordering or loss.
fn pattern(len: usize) -> Vec<u8> {
    let mut x = 0x1234_5678u32;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// Sends `data` to VM 2's echo server from VM 1, paced so it lasts a few
/// seconds, and reads the echo; returns what came back.
fn transfer(s: &Setup, data: Vec<u8>) -> std::thread::JoinHandle<Vec<u8>> {
    let to = SocketAddr::from((s.vm2.addr, 5000));
    let stream = s
        .vm1
        .ns
        .run(move || TcpStream::connect_timeout(&to, Duration::from_secs(10)))
        .unwrap()
        .unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut w = stream.try_clone().unwrap();
    let len = data.len();
    std::thread::spawn(move || {
        for chunk in data.chunks(32 * 1024) {
            if w.write_all(chunk).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    let mut r = stream;
    std::thread::spawn(move || {
        let mut got = Vec::with_capacity(len);
        let mut buf = vec![0u8; 65536];
        while got.len() < len {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        got
    })
}

/// The instance port whose received count grows during the transfer.
fn busy_instance(url: &str) -> u16 {
    let a = agent_status(url);
    std::thread::sleep(Duration::from_millis(400));
    let b = agent_status(url);
    let grew = |p: u16| health(&b, p).rx_packets - health(&a, p).rx_packets;
    let (g0, g1) = (grew(FWS[0]), grew(FWS[1]));
    eprintln!(
        "instance packets in 400 ms: port {}: {g0}, port {}: {g1}",
        FWS[0], FWS[1]
    );
    assert!(g0 + g1 > 0, "the transfer crosses an instance");
    if g0 >= g1 {
        FWS[0]
    } else {
        FWS[1]
    }
}

#[test]
fn killing_the_flows_instance_moves_it_without_breaking_the_transfer() {
    kill_the_flows_instance(1);
}

/// With two forwarding threads the flow may be forwarded by the thread that
/// hears no heartbeat: it takes the failover from thread 0's health view.
#[test]
fn killing_the_flows_instance_moves_it_with_two_forwarding_threads() {
    kill_the_flows_instance(2);
}

fn kill_the_flows_instance(threads: usize) {
    let Some(s) = setup_with(threads) else { return };
    let data = pattern(6 << 20);
    let done = transfer(&s, data.clone());
    std::thread::sleep(Duration::from_millis(300));
    let victim = busy_instance(&s.url);
    let other = FWS.into_iter().find(|p| *p != victim).unwrap();
    let before = agent_status(&s.url);
    let old_pid = pid(&before, victim).unwrap();
    let other_rx = health(&before, other).rx_packets;
    // SAFETY: kill(2) on the instance process the agent reported.
    unsafe {
        libc::kill(old_pid as i32, libc::SIGKILL);
    }
    let got = done.join().unwrap();
    assert_eq!(got.len(), data.len(), "the whole transfer came back");
    assert!(got == data, "identical bytes");

    let s1 = wait_for(&s.url, 5, "the failover event", |st| {
        st.failover_events.iter().any(|e| e.port == victim)
    });
    let e = s1
        .failover_events
        .iter()
        .find(|e| e.port == victim)
        .unwrap();
    eprintln!(
        "failover of {}: suspected (missed deadline) -> applied: {} us (detected after {} us)",
        e.instance,
        e.applied_at_us.saturating_sub(e.suspected_at_us),
        e.detected_at_us.saturating_sub(e.suspected_at_us)
    );
    assert!(e.applied_at_us >= e.detected_at_us);
    assert!(
        health(&s1, other).rx_packets > other_rx,
        "the survivor took the flow over"
    );
    // The supervisor restarts the killed instance, which rejoins.
    let s2 = wait_for(&s.url, 15, "the restarted instance to rejoin", |st| {
        pid(st, victim).is_some_and(|p| p != old_pid)
            && !health(st, victim).suspected
            && st
                .failover_events
                .iter()
                .any(|e| e.port == victim && e.rejoined_at_us.is_some())
    });
    assert!(health(&s2, victim).alive);
    let m: String = ureq::get(&format!("{}/metrics", s.url))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    let failovers: u64 = m
        .lines()
        .find_map(|l| l.strip_prefix("sluice_agent_failovers_total{host=\"1\"} "))
        .and_then(|v| v.parse().ok())
        .expect("the failover counter");
    assert!(failovers >= 1, "{m}");
    promtool::assert_lints_clean(&m);
}

#[test]
fn a_paused_instance_is_suspected_and_rejoins_without_restart() {
    let Some(s) = setup() else { return };
    let port = FWS[1];
    let st = agent_status(&s.url);
    let p = pid(&st, port).unwrap();
    // SAFETY: kill(2) on the instance process the agent reported.
    unsafe {
        libc::kill(p as i32, libc::SIGSTOP);
    }
    let s1 = wait_for(&s.url, 5, "the paused instance to be suspected", |st| {
        health(st, port).suspected && st.failover_events.iter().any(|e| e.port == port)
    });
    let e = s1.failover_events.iter().find(|e| e.port == port).unwrap();
    eprintln!(
        "pause of {}: suspected -> applied {} us",
        e.instance,
        e.applied_at_us.saturating_sub(e.suspected_at_us)
    );
    assert_eq!(e.rejoined_at_us, None);
    // Traffic still flows through the survivor meanwhile.
    let data = pattern(256 << 10);
    let got = transfer(&s, data.clone()).join().unwrap();
    assert!(got == data, "a new transfer crosses the surviving instance");
    // SAFETY: as above.
    unsafe {
        libc::kill(p as i32, libc::SIGCONT);
    }
    let s2 = wait_for(&s.url, 5, "the paused instance to rejoin", |st| {
        !health(st, port).suspected
            && st
                .failover_events
                .iter()
                .any(|e| e.port == port && e.rejoined_at_us.is_some())
    });
    assert_eq!(pid(&s2, port), Some(p), "not restarted");
    assert!(
        s2.failover_events
            .iter()
            .filter(|e| e.port == port)
            .all(|e| e.rejoined_at_us.is_some()),
        "{:?}",
        s2.failover_events
    );
}
