//! The agent forwarding real traffic (needs root): one host namespace, two VM
//! namespaces attached to it, the agent in-process with its data plane in the
//! host namespace. A TCP connection between the VMs crosses the agent; a FIB drop
//! entry blocks it; a configuration that cannot be installed is refused and the
//! old one keeps forwarding; a block on request stops it until removed.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::time::Duration;

use sluice_agent::testing::{agent_status, agent_status_when, attach_vm, is_root, VmHandle};
use sluice_agent::{Agent, AgentOptions};
use sluice_netns::Netns;
use sluice_proto::{AgentConfig, PortConfig, TenantFib};
use sluice_switch::{Action, Entry, GroupId, Match, Output, PortId, Prefix};

fn to(id: u64, dst: &str, port: u16) -> Entry {
    Entry {
        id,
        priority: 10,
        m: Match {
            dst: Some(Prefix::parse(dst).unwrap()),
            ..Match::default()
        },
        actions: vec![Action::Output(Output::Port(PortId(port)))],
    }
}

fn config(version: u64, vm1: &VmHandle, vm2: &VmHandle, extra: Vec<Entry>) -> AgentConfig {
    let mut entries = vec![to(1, "10.0.0.1/32", 1), to(2, "10.0.0.2/32", 2)];
    entries.extend(extra);
    AgentConfig {
        pardons: Vec::new(),
        health_checks: Vec::new(),
        version,
        host: 1,
        peers: vec![],
        ports: vec![
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
        ],
        tenants: vec![TenantFib {
            tenant: "t".into(),
            vni: 7,
            entries,
            groups: vec![],
            senders: None,
            sources: None,
            chains: Vec::new(),
        }],
        instances: vec![],
        group_policies: vec![],
        fabric_auth: None,
    }
}

fn put(url: &str, cfg: &AgentConfig) -> u16 {
    match ureq::put(&format!("{url}/v1/config")).send_json(cfg) {
        Ok(r) => r.status(),
        Err(ureq::Error::Status(c, _)) => c,
        Err(e) => panic!("{e}"),
    }
}

/// Connects from `vm` to `to` and exchanges a message with the echo server;
/// None if the connection cannot be made.
fn echo(vm: &VmHandle, to: SocketAddr, msg: &[u8], timeout: Duration) -> Option<Vec<u8>> {
    let s = vm
        .ns
        .run(move || TcpStream::connect_timeout(&to, timeout))
        .unwrap()
        .ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut s = s;
    s.write_all(msg).ok()?;
    let mut buf = vec![0u8; msg.len()];
    s.read_exact(&mut buf).ok()?;
    Some(buf)
}

/// The agent, in-process, with its data plane in namespace `host`.
fn start_agent(host: &Netns) -> Agent {
    start_agent_with(host, 1)
}

/// The same with `threads` forwarding threads.
fn start_agent_with(host: &Netns, threads: usize) -> Agent {
    Agent::start(&AgentOptions {
        host: 1,
        name: "h1".into(),
        netns: Some(host.name().to_string()),
        underlay: Ipv4Addr::new(10, 255, 0, 1),
        controller: None,
        controller_token: None,
        controller_tls: None,
        api_token: None,
        listen: "127.0.0.1:0".into(),
        prefix: "t".into(),
        run_dir: None,
        udp: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, sluice_proto::GENEVE_PORT),
        instance_exe: None,
        suspect_after: None,
        seawall: None,
        vm_mtu: None,
        capacity: None,
        api_tls: false,
        siem: None,
        dataplane_threads: threads,
    })
    .unwrap()
}

/// An echo server in VM 2, on port 5000.
/// A host namespace with VMs 10.0.0.1 and 10.0.0.2 and an agent on it (the
/// namespace is returned so it lives as long as the test).
fn two_vms_and_agent() -> (Netns, VmHandle, VmHandle, Agent) {
    let host = Netns::new("h").unwrap();
    let vm1 = attach_vm(host.name(), "vm1", Ipv4Addr::new(10, 0, 0, 1)).unwrap();
    let vm2 = attach_vm(host.name(), "vm2", Ipv4Addr::new(10, 0, 0, 2)).unwrap();
    let agent = start_agent(&host);
    (host, vm1, vm2, agent)
}

fn echo_server(vm2: &VmHandle) -> SocketAddr {
    let listener = vm2
        .ns
        .run(|| TcpListener::bind("10.0.0.2:5000"))
        .unwrap()
        .unwrap();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { break };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 || s.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    "10.0.0.2:5000".parse().unwrap()
}

#[test]
fn vms_talk_through_the_agent() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let (_host, vm1, vm2, agent) = two_vms_and_agent();
    let url = agent.api_url();
    let server = echo_server(&vm2);

    assert_eq!(put(&url, &config(1, &vm1, &vm2, vec![])), 200);
    let msg = vec![0x5a; 3000];
    assert_eq!(
        echo(&vm1, server, &msg, Duration::from_secs(10)).as_deref(),
        Some(&msg[..]),
        "VM 1 reaches VM 2 through the agent"
    );
    // Counters are published periodically.
    let s = agent_status_when(&url, |s| s.ports.iter().all(|p| p.counters.tx_packets > 0));
    assert_eq!(s.config_version, 1);
    for p in &s.ports {
        assert!(p.counters.rx_packets >= 3, "{p:?}");
        assert!(p.counters.tx_packets >= 3, "{p:?}");
    }
    let vm1_port = s.ports.iter().find(|p| p.id == 1).unwrap();
    assert!(vm1_port.counters.rx_bytes > 3000, "{vm1_port:?}");

    // A FIB that cannot be installed is refused; the old one keeps forwarding.
    let mut bad = config(2, &vm1, &vm2, vec![]);
    bad.tenants[0].entries[0].actions = vec![Action::Select(GroupId(77))];
    assert_eq!(put(&url, &bad), 400);
    assert_eq!(agent_status(&url).config_version, 1);
    assert_eq!(
        echo(&vm1, server, b"again", Duration::from_secs(10)).as_deref(),
        Some(&b"again"[..])
    );

    // A drop entry for the service blocks new connections.
    let block = Entry {
        id: 9,
        priority: 100,
        m: Match {
            dst: Some(Prefix::parse("10.0.0.2/32").unwrap()),
            proto: Some(6),
            dport: Some((5000, 5000)),
            ..Match::default()
        },
        actions: vec![Action::Drop],
    };
    assert_eq!(put(&url, &config(3, &vm1, &vm2, vec![block])), 200);
    assert_eq!(agent_status(&url).config_version, 3);
    assert_eq!(
        echo(&vm1, server, b"blocked", Duration::from_secs(1)),
        None,
        "the drop entry blocks the connection"
    );
    let m = ureq::get(&format!("{url}/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    let fib_drops: u64 = m
        .lines()
        .find(|l| l.starts_with("sluice_agent_drops_total{host=\"1\",reason=\"fib_drop\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(fib_drops >= 1, "{m}");
    agent.shutdown();
}

/// The count of drops of `reason` in the agent's metrics.
fn drops(url: &str, reason: &str) -> u64 {
    let m = ureq::get(&format!("{url}/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    let want = format!("sluice_agent_drops_total{{host=\"1\",reason=\"{reason}\"}}");
    m.lines()
        .find(|l| l.starts_with(&want))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {want} in {m}"))
}

/// A block on request as the controller compiles it (VM 2 blocks VM 1)
/// stops real traffic at the agent, is counted as `blocked`, and its
/// removal lets the same connection through again.
#[test]
fn a_block_on_request_stops_real_traffic_until_removed() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let (_host, vm1, vm2, agent) = two_vms_and_agent();
    let url = agent.api_url();
    let server = echo_server(&vm2);
    let spec = sluice_tenant::TenantSpec::parse(
        "tenant: t\nelements:\n  a: { type: service, vms: { vm1: 10.0.0.1 } }\n  \
         b: { type: service, vms: { vm2: 10.0.0.2 } }\nchains: []\n",
        "t.yaml",
        None,
    )
    .unwrap();
    let block = sluice_controller::blocks::Block {
        id: 1,
        tenant: "t".into(),
        vm: "vm2".into(),
        from: "vm1".into(),
        prefix: "10.0.0.1/32".into(),
        comment: None,
        created_at_ms: 0,
        created_by: "t-ci".into(),
    };
    let entries = sluice_controller::blocks::entries(&spec, 7, [&block]);
    assert_eq!(entries.len(), 1);

    assert_eq!(put(&url, &config(1, &vm1, &vm2, entries)), 200);
    assert_eq!(
        echo(&vm1, server, b"unwanted", Duration::from_secs(1)),
        None,
        "the block stops the connection"
    );
    assert!(drops(&url, "blocked") >= 1);
    assert_eq!(drops(&url, "fib_drop"), 0);

    assert_eq!(put(&url, &config(2, &vm1, &vm2, vec![])), 200);
    assert_eq!(
        echo(&vm1, server, b"welcome", Duration::from_secs(10)).as_deref(),
        Some(&b"welcome"[..]),
        "removing the block restores forwarding"
    );
    agent.shutdown();
}

/// The value of the metrics line that starts with `key` (0 if absent).
fn metric(m: &str, key: &str) -> u64 {
    m.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// With two forwarding threads, each VM port is read by one of them and
/// every flow is forwarded by the thread of its hash, both ways: frames read
/// by the other thread are handed over. Many connections all work, both
/// threads forward, frames are handed over, the counters are summed, and a
/// new configuration reaches both threads.
#[test]
fn many_connections_cross_two_forwarding_threads() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let host = Netns::new("h").unwrap();
    let vm1 = attach_vm(host.name(), "vm1", Ipv4Addr::new(10, 0, 0, 1)).unwrap();
    let vm2 = attach_vm(host.name(), "vm2", Ipv4Addr::new(10, 0, 0, 2)).unwrap();
    let agent = start_agent_with(&host, 2);
    let url = agent.api_url();
    let server = echo_server(&vm2);
    assert_eq!(put(&url, &config(1, &vm1, &vm2, vec![])), 200);
    let conns = 48;
    for i in 0..conns {
        let msg = vec![i as u8; 2000 + i * 10];
        assert_eq!(
            echo(&vm1, server, &msg, Duration::from_secs(10)).as_deref(),
            Some(&msg[..]),
            "connection {i}"
        );
    }
    // A new configuration (one data plane per thread) forwards on both.
    assert_eq!(put(&url, &config(2, &vm1, &vm2, vec![])), 200);
    assert_eq!(agent_status(&url).config_version, 2);
    for i in 0..16 {
        let msg = vec![0xa0; 1000 + i];
        assert_eq!(
            echo(&vm1, server, &msg, Duration::from_secs(10)).as_deref(),
            Some(&msg[..]),
            "connection {i} after the new configuration"
        );
    }
    // Published at most every 50 ms.
    std::thread::sleep(Duration::from_millis(200));
    let m = ureq::get(&format!("{url}/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    assert_eq!(metric(&m, "sluice_dataplane_threads{host=\"1\"}"), 2, "{m}");
    let per = |name: &str, t: u32| {
        metric(
            &m,
            &format!("sluice_dataplane_thread_{name}_total{{host=\"1\",thread=\"{t}\"}}"),
        )
    };
    for t in 0..2 {
        assert!(per("forwarded", t) > 0, "thread {t} forwarded nothing: {m}");
        assert!(per("read", t) > 0, "thread {t} read nothing: {m}");
    }
    let handed = per("handed_out", 0) + per("handed_out", 1);
    assert!(handed > 0, "no frame was handed over: {m}");
    assert_eq!(handed, per("handed_in", 0) + per("handed_in", 1));
    assert_eq!(per("handoff_drops", 0) + per("handoff_drops", 1), 0);
    // Every frame read was forwarded by exactly one thread.
    assert_eq!(
        per("read", 0) + per("read", 1),
        per("forwarded", 0) + per("forwarded", 1),
        "{m}"
    );
    // The ports' counters are the threads' sum: every frame VM 1 sent
    // (SYN, data, ACKs of 64 connections) was counted once.
    let s = agent_status(&url);
    let p1 = s.ports.iter().find(|p| p.id == 1).unwrap();
    let p2 = s.ports.iter().find(|p| p.id == 2).unwrap();
    assert!(p1.counters.rx_packets >= 3 * 64, "{p1:?}");
    assert_eq!(
        p1.counters.rx_packets, p2.counters.tx_packets,
        "{p1:?} {p2:?}"
    );
    agent.shutdown();
}
