//! An instance in its own namespace, fed by a fake agent over a veth (needs root).

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sluice_instance::{run, run_with_stats, InstanceError, InstanceOptions, StatsHandle};
use sluice_netio::in_netns;
use sluice_proto::InstanceHeartbeat;
use sluice_switch::tunnel::{geneve_header, parse_geneve_payload};
use sluice_testbed::{unique_name, veth, Netns};
use sluice_trafficgen::{Endpoints, TcpConversation};
use sluice_wire::IpAddr;

const AGENT_IP: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 1);
const INSTANCE_IP: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 2);

const CHAIN: &str = r#"
name: t7.fw
functions:
  - type: firewall
    name: fw
    rules: |
      allow tcp from 10.1.0.0/16 to 10.2.0.0/16 port 80
      deny tcp from any to any port 22
      default deny
settings:
  batch_size: 32
  timer_interval_ms: 100
"#;

/// A file removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(text: &str) -> TempFile {
        let p = std::env::temp_dir().join(format!("{}.yaml", unique_name("chain")));
        std::fs::write(&p, text).unwrap();
        TempFile(p)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The running instance; stopped and joined on drop, even when a test fails.
struct Running {
    stop: Arc<AtomicBool>,
    stats: Arc<StatsHandle>,
    handle: Option<JoinHandle<Result<(), InstanceError>>>,
}

impl Running {
    fn start(opts: InstanceOptions) -> Running {
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(StatsHandle::default());
        let (s, st) = (stop.clone(), stats.clone());
        let handle = std::thread::spawn(move || run_with_stats(&opts, &s, &st));
        let r = Running {
            stop,
            stats,
            handle: Some(handle),
        };
        // The first statistics are published once the socket is open.
        let deadline = Instant::now() + Duration::from_secs(10);
        while r.stats.snapshot().name.is_empty() {
            assert!(
                !r.handle.as_ref().unwrap().is_finished(),
                "instance ended early"
            );
            assert!(Instant::now() < deadline, "instance did not start");
            std::thread::sleep(Duration::from_millis(5));
        }
        r
    }

    fn stop(mut self) -> Result<(), InstanceError> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().unwrap().join().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// What [`one_instance`] made, removed on drop (namespaces and chain file).
struct OneLab {
    _agent_ns: Netns,
    _inst_ns: Netns,
    _chain: TempFile,
}

/// The firewall chain on one instance in its own namespace, with state in
/// `state`, and a fake agent's socket (reads time out after `timeout`) in
/// another namespace joined by a veth.
fn one_instance(state: String, timeout: Duration) -> (OneLab, UdpSocket, Running) {
    one_instance_of(CHAIN, state, timeout)
}

/// [`one_instance`] with the chain `text`.
fn one_instance_of(text: &str, state: String, timeout: Duration) -> (OneLab, UdpSocket, Running) {
    let agent_ns = Netns::new("ag").unwrap();
    let inst_ns = Netns::new("in").unwrap();
    veth(&agent_ns, "p1", &inst_ns, "eth0").unwrap();
    agent_ns.addr("p1", "10.78.0.1/30").unwrap();
    inst_ns.addr("eth0", "10.78.0.2/30").unwrap();
    let chain = TempFile::new(text);
    let agent = in_netns(agent_ns.name(), || UdpSocket::bind((AGENT_IP, 6081)))
        .unwrap()
        .unwrap();
    agent.set_read_timeout(Some(timeout)).unwrap();
    let inst = Running::start(InstanceOptions {
        name: "fw-0".into(),
        netns: Some(inst_ns.name().to_string()),
        listen: SocketAddrV4::new(INSTANCE_IP, 6081),
        agent: SocketAddrV4::new(AGENT_IP, 6081),
        chain: chain.0.clone(),
        state,
        eve: None,
        backends: None,
    });
    let lab = OneLab {
        _agent_ns: agent_ns,
        _inst_ns: inst_ns,
        _chain: chain,
    };
    (lab, agent, inst)
}

fn conversation(port: u16) -> Vec<Vec<u8>> {
    conversation_between(40_000 + port, port)
}

fn conversation_between(client_port: u16, server_port: u16) -> Vec<Vec<u8>> {
    let ep = Endpoints {
        client: IpAddr::V4([10, 1, 0, 5]),
        server: IpAddr::V4([10, 2, 0, 7]),
        client_port,
        server_port,
    };
    let mut conv = TcpConversation::new(ep, 1000, 5000);
    let mut buf = vec![0u8; 2048];
    let mut out = Vec::new();
    conv.handshake(&mut buf, &mut |b| out.push(b.to_vec()));
    conv.data(&mut buf, true, b"GET / HTTP/1.1\r\n\r\n", &mut |b| {
        out.push(b.to_vec())
    });
    conv.data(&mut buf, false, &[b'x'; 1200], &mut |b| {
        out.push(b.to_vec())
    });
    conv.teardown(&mut buf, &mut |b| out.push(b.to_vec()));
    out
}

fn encap(vni: u32, ch: Option<(u16, u8)>, frame: &[u8]) -> Vec<u8> {
    let (h, n) = geneve_header(vni, ch);
    let mut d = h[..n].to_vec();
    d.extend_from_slice(frame);
    d
}

#[test]
fn firewall_instance_returns_allowed_frames_with_their_geneve_header() {
    let (_lab, agent, inst) = one_instance("local".into(), Duration::from_millis(200));

    // Alternate chain positions and headers without the option; interleave the
    // denied conversation and malformed datagrams.
    let allowed: Vec<Vec<u8>> = conversation(80)
        .iter()
        .enumerate()
        .map(|(i, f)| encap(0x00_7007, (i % 3 != 2).then_some((3, i as u8)), f))
        .collect();
    let denied: Vec<Vec<u8>> = conversation(22)
        .iter()
        .map(|f| encap(0x00_7007, Some((3, 0)), f))
        .collect();
    let mut malformed = [vec![0u8; 3], allowed[0].clone(), allowed[0].clone()];
    malformed[1][0] |= 0x40; // Geneve version 1
    malformed[2][2] = 0x08; // protocol 0x0858: not Ethernet
    let to = SocketAddrV4::new(INSTANCE_IP, 6081);
    let mut sent = 0;
    for i in 0..allowed.len().max(denied.len()) {
        for d in [allowed.get(i), denied.get(i), malformed.get(i)]
            .into_iter()
            .flatten()
        {
            agent.send_to(d, to).unwrap();
            sent += 1;
        }
    }

    let mut got = Vec::new();
    let mut buf = vec![0u8; 9216];
    let deadline = Instant::now() + Duration::from_secs(10);
    // Read until every allowed frame is back, then a little longer to catch
    // anything that should not come.
    let mut quiet_after_all = 0;
    let mut heartbeats = Vec::new();
    let mut last = Instant::now();
    while Instant::now() < deadline && quiet_after_all < 2 {
        match agent.recv_from(&mut buf) {
            // Heartbeats keep coming every 10 ms: they do not break the silence.
            Ok((n, _)) if InstanceHeartbeat::is_heartbeat(&buf[..n]) => {
                heartbeats.push(InstanceHeartbeat::decode(&buf[..n]).expect("complete"));
                if got.len() >= allowed.len() && last.elapsed() >= Duration::from_millis(200) {
                    quiet_after_all += 1;
                    last = Instant::now();
                }
            }
            Ok((n, from)) => {
                last = Instant::now();
                assert_eq!(
                    from,
                    std::net::SocketAddr::V4(to),
                    "sent from the instance's address"
                );
                got.push(buf[..n].to_vec());
            }
            Err(_) if got.len() >= allowed.len() => quiet_after_all += 1,
            Err(_) => {}
        }
    }
    assert_eq!(got.len(), allowed.len(), "only the allowed frames return");
    assert!(heartbeats.len() >= 2, "the instance heartbeats");
    assert!(
        heartbeats.windows(2).all(|w| w[1].seq > w[0].seq),
        "numbered in order"
    );
    let hb = heartbeats.last().unwrap();
    assert!(
        hb.rx_packets > 0 && hb.tx_packets > 0 && hb.pid > 0,
        "{hb:?}"
    );
    for (g, a) in got.iter().zip(&allowed) {
        assert_eq!(g, a, "byte-identical, Geneve header included");
        let (vni, ch, off) = parse_geneve_payload(g).unwrap();
        assert_eq!((vni, ch, off), parse_geneve_payload(a).unwrap());
    }

    let stats = inst.stats.clone();
    inst.stop().unwrap();
    let s = stats.snapshot();
    assert_eq!(s.rx, sent as u64);
    assert_eq!(s.tx, allowed.len() as u64);
    assert_eq!(s.malformed, 3);
    assert_eq!(s.drops.get("geneve_bad_header"), Some(&2));
    assert_eq!(s.drops.get("geneve_not_ethernet"), Some(&1));
    assert_eq!(s.chain.forwarded, allowed.len() as u64);
    assert_eq!(s.chain.dropped, denied.len() as u64);
}

/// Two workers, each with its own local store: every server packet passes the
/// firewall only on the state its connection's SYN left, so it must reach the
/// worker its SYN reached.
#[test]
fn two_workers_meet_both_directions_of_every_flow_and_beat_as_one() {
    let chain = CHAIN.replace("settings:\n", "settings:\n  workers: 2\n");
    let (_lab, agent, inst) = one_instance_of(&chain, "local".into(), Duration::from_millis(200));
    let to = SocketAddrV4::new(INSTANCE_IP, 6081);
    let mut sent = Vec::new();
    for c in 0..24u16 {
        for f in conversation_between(41_000 + c, 80) {
            sent.push(encap(0x00_7007, Some((3, 0)), &f));
        }
    }
    for d in &sent {
        agent.send_to(d, to).unwrap();
    }
    let got = collect(&agent, sent.len());
    assert_eq!(got.len(), sent.len(), "every packet of every flow returns");
    let mut want = sent.clone();
    let mut have = got.clone();
    want.sort();
    have.sort();
    assert_eq!(have, want);
    // Heartbeats count both workers' packets.
    agent
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut buf = vec![0u8; 9216];
    let until = Instant::now() + Duration::from_secs(10);
    let hb = loop {
        assert!(
            Instant::now() < until,
            "no heartbeat with every packet counted"
        );
        if let Ok((n, _)) = agent.recv_from(&mut buf) {
            if let Some(hb) = InstanceHeartbeat::decode(&buf[..n]) {
                if hb.tx_packets == sent.len() as u64 {
                    break hb;
                }
            }
        }
    };
    assert_eq!(hb.rx_packets, sent.len() as u64);
    assert!(hb.pid > 0);
    let stats = inst.stats.clone();
    inst.stop().unwrap();
    let s = stats.snapshot();
    assert_eq!((s.rx, s.tx), (sent.len() as u64, sent.len() as u64));
    assert_eq!(s.chain.forwarded, sent.len() as u64);
    assert_eq!(s.chain.stages[0].dropped, vec![]);
}

#[test]
fn startup_errors_are_reported_not_panics() {
    let stop = AtomicBool::new(false);
    let chain = TempFile::new(CHAIN);
    let opts = |chain: PathBuf, state: &str, netns: Option<&str>| InstanceOptions {
        name: "bad".into(),
        netns: netns.map(str::to_string),
        listen: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0),
        agent: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 6081),
        chain,
        state: state.into(),
        eve: None,
        backends: None,
    };
    let e = run(&opts("/nonexistent.yaml".into(), "local", None), &stop).unwrap_err();
    assert!(matches!(e, InstanceError::Chain { .. }), "{e}");
    let e = run(&opts(chain.0.clone(), "etcd://x", None), &stop).unwrap_err();
    assert!(matches!(e, InstanceError::UnknownState(_)), "{e}");
    let e = run(
        &opts(chain.0.clone(), "local", Some("sluice-no-such-ns")),
        &stop,
    )
    .unwrap_err();
    assert!(matches!(e, InstanceError::Socket { .. }), "{e}");
    // Workers with local state cannot keep a NAT's replies with their mappings.
    let nat = TempFile::new(
        "name: n\nfunctions:\n  - type: nat\n    inside: [10.0.0.0/8]\n    pool: [203.0.113.0/28]\nsettings:\n  workers: 2\n",
    );
    let e = run(&opts(nat.0.clone(), "local", None), &stop).unwrap_err();
    assert!(matches!(e, InstanceError::Workers { .. }), "{e}");
    assert!(e.to_string().contains("\"nat\""), "{e}");
    // Already stopped: opens, flushes and returns at once.
    stop.store(true, Ordering::Relaxed);
    run(&opts(chain.0.clone(), "local", None), &stop).unwrap();
}

/// Receives datagrams on `sock` until `want` arrived and then nothing more for a
/// while (or a safety deadline passes).
fn collect(sock: &UdpSocket, want: usize) -> Vec<Vec<u8>> {
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 9216];
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut quiet = 0;
    let mut last = Instant::now();
    while Instant::now() < deadline && quiet < 2 {
        match sock.recv_from(&mut buf) {
            // Heartbeats keep coming every 10 ms: they do not break the silence.
            Ok((n, _)) if InstanceHeartbeat::is_heartbeat(&buf[..n]) => {
                if got.len() >= want && last.elapsed() >= Duration::from_millis(200) {
                    quiet += 1;
                    last = Instant::now();
                }
            }
            Ok((n, _)) => {
                last = Instant::now();
                got.push(buf[..n].to_vec());
            }
            Err(_) if got.len() >= want => quiet += 1,
            Err(_) => {}
        }
    }
    got
}

#[test]
fn two_instances_share_connection_state_through_redis() {
    if sluice_state_redis::server::server_binary().is_none() {
        eprintln!("skipped: no redis-server");
        return;
    }
    let redis = sluice_state_redis::server::RedisServer::start(&[]).unwrap();
    let agent_ns = Netns::new("ag").unwrap();
    let chain = TempFile::new(CHAIN);
    let mut nss = Vec::new();
    let mut socks = Vec::new();
    let mut insts = Vec::new();
    for k in 1..=2u8 {
        let ns = Netns::new("in").unwrap();
        let port = format!("p{k}");
        veth(&agent_ns, &port, &ns, "eth0").unwrap();
        agent_ns.addr(&port, &format!("10.78.{k}.1/30")).unwrap();
        ns.addr("eth0", &format!("10.78.{k}.2/30")).unwrap();
        let agent_addr = SocketAddrV4::new(Ipv4Addr::new(10, 78, k, 1), 6081);
        socks.push(
            in_netns(agent_ns.name(), || UdpSocket::bind(agent_addr))
                .unwrap()
                .unwrap(),
        );
        insts.push(Running::start(InstanceOptions {
            name: format!("fw-{k}"),
            netns: Some(ns.name().to_string()),
            listen: SocketAddrV4::new(Ipv4Addr::new(10, 78, k, 2), 6081),
            agent: agent_addr,
            chain: chain.0.clone(),
            state: redis.url(),
            eve: None,
            backends: None,
        }));
        nss.push(ns);
    }
    let to = |k: u8| SocketAddrV4::new(Ipv4Addr::new(10, 78, k, 2), 6081);
    let frames: Vec<Vec<u8>> = conversation(80)
        .iter()
        .map(|f| encap(0x00_7007, Some((3, 0)), f))
        .collect();
    // The handshake through instance 1 creates the connection's state...
    for d in &frames[..3] {
        socks[0].send_to(d, to(1)).unwrap();
    }
    assert_eq!(collect(&socks[0], 3), frames[..3].to_vec());
    // ...which lets the rest of the connection through instance 2, while a
    // mid-stream packet of a connection nobody saw open is dropped there.
    let stray = encap(0x00_7007, Some((3, 0)), &conversation(81)[3]);
    socks[1].send_to(&stray, to(2)).unwrap();
    for d in &frames[3..] {
        socks[1].send_to(d, to(2)).unwrap();
    }
    assert_eq!(collect(&socks[1], frames.len() - 3), frames[3..].to_vec());
    let stats: Vec<_> = insts.iter().map(|i| i.stats.clone()).collect();
    for i in insts {
        i.stop().unwrap();
    }
    let s2 = stats[1].snapshot();
    assert_eq!(s2.chain.stages[0].dropped, vec![("no_state", 1)]);
    assert_eq!(stats[0].snapshot().tx, 3);
}

/// The data path blocks on store round trips; its heartbeats come from a
/// thread of their own, so an instance waiting on a slow store is not taken
/// for a dead one (the soak of `sluice experiment chaos` failed live
/// instances over in bursts when the loop sent them itself).
#[test]
fn heartbeats_go_on_while_the_data_path_waits_on_the_store() {
    if sluice_state_redis::server::server_binary().is_none() {
        eprintln!("skipped: no redis-server");
        return;
    }
    let redis = sluice_state_redis::server::RedisServer::start(&[]).unwrap();
    let (_lab, agent, inst) = one_instance(redis.url(), Duration::from_millis(20));
    let mut buf = vec![0u8; 9216];
    let until = Instant::now() + Duration::from_secs(10);
    let first = loop {
        assert!(Instant::now() < until, "no heartbeat");
        if let Ok((n, _)) = agent.recv_from(&mut buf) {
            if let Some(hb) = InstanceHeartbeat::decode(&buf[..n]) {
                break hb;
            }
        }
    };
    // The store stops answering; the SYN that follows needs it (the
    // firewall records the new connection before the SYN may leave).
    let syn = encap(0x00_7007, Some((3, 0)), &conversation(80)[0]);
    redis.pause();
    agent
        .send_to(&syn, SocketAddrV4::new(INSTANCE_IP, 6081))
        .unwrap();
    let paused = Instant::now();
    let mut beats_while_waiting = 0;
    let mut returned_while_paused = false;
    while paused.elapsed() < Duration::from_millis(600) {
        if let Ok((n, _)) = agent.recv_from(&mut buf) {
            match InstanceHeartbeat::decode(&buf[..n]) {
                // Past the first 100 ms: nothing sent before the SYN arrived.
                Some(hb) if hb.seq > first.seq && paused.elapsed() > Duration::from_millis(100) => {
                    beats_while_waiting += 1
                }
                Some(_) => {}
                None => returned_while_paused = true,
            }
        }
    }
    redis.resume();
    assert!(
        !returned_while_paused,
        "the SYN came back without the store: the data path did not wait on it"
    );
    assert!(
        beats_while_waiting > 0,
        "no heartbeat while the data path waited on the store"
    );
    // And the SYN leaves once the store answers.
    let until = Instant::now() + Duration::from_secs(5);
    let back = loop {
        assert!(Instant::now() < until, "the SYN never came back");
        if let Ok((n, _)) = agent.recv_from(&mut buf) {
            if !InstanceHeartbeat::is_heartbeat(&buf[..n]) {
                break buf[..n].to_vec();
            }
        }
    };
    assert_eq!(back, syn);
    inst.stop().unwrap();
}
