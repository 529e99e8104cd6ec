//! "Any packet to any instance" (StatelessNF §4.1): the same traces through one
//! instance with local state, and through 2, 3 and 4 instances sharing a Redis store
//! (standalone and a 3-primary cluster) with packets sprayed at random, with each
//! flow's two directions on different instances, and with an instance killed
//! mid-trace. Verdicts, forwarded bytes, alerts and flow records must be identical.

use std::collections::BTreeMap;
use std::path::Path;

use sluice_chain::{Chain, ChainSpec, Sharing};
use sluice_nf::{Event, Verdict};
use sluice_packet::{Batch, PacketPool};
use sluice_state::{LocalStore, StateStore};
use sluice_state_redis::server::{flushall, RedisCluster, RedisServer};
use sluice_state_redis::{ClusterStore, RedisStore};
use sluice_trafficgen::{generate, Endpoints, Proto, Rng, TcpConversation, TrafficSpec};
use sluice_wire::build::tcp_v4;
use sluice_wire::parse::parse_frame;
use sluice_wire::tcp::flags::SYN;
use sluice_wire::IpAddr;

const CHAIN: &str = r#"
name: any-instance
functions:
  - type: firewall
    rules: |
      allow tcp from 10.0.0.0/8 to 192.0.2.0/24 port 80
      allow udp from 10.0.0.0/8 to 192.0.2.0/24
      default deny
  - type: ips
    rules:
      - 'drop tcp any any -> any 80 (msg:"attack"; content:"/etc/passwd"; sid:1; rev:1;)'
      - 'alert tcp any 80 -> any any (msg:"leak"; content:"SECRET-TOKEN"; sid:2; rev:1;)'
      - 'alert udp any any -> any any (msg:"udp sig"; content:"zzz"; sid:3; rev:1;)'
  - type: monitor
settings:
  batch_size: 16
"#;

/// The test traffic: long-lived TCP flows with handshakes and teardowns, UDP flows,
/// signatures split across segments (in and out of order), retransmissions, denied
/// connections and mid-stream packets without state.
fn trace() -> Vec<(u64, Vec<u8>)> {
    let mut flows: Vec<Vec<Vec<u8>>> = Vec::new();
    let mut buf = vec![0u8; 2048];
    for f in 0..24u32 {
        let ep = Endpoints {
            client: IpAddr::V4([10, 9, (f >> 8) as u8, f as u8 + 1]),
            server: IpAddr::V4([192, 0, 2, 10 + (f % 3) as u8]),
            client_port: 30_000 + f as u16,
            server_port: 80,
        };
        let mut conv = TcpConversation::new(ep, 77 * f + 1, 991 * f + 5);
        let mut pk: Vec<Vec<u8>> = Vec::new();
        conv.handshake(&mut buf, &mut |b| pk.push(b.to_vec()));
        let req: Vec<&[u8]> = match f % 6 {
            0 => vec![b"GET /cgi/../etc/pa", b"sswd HTTP/1.1\r\n\r\n"],
            1 => vec![b"GET /ok HTTP/1.1\r\n", b"Host: x\r\n\r\n"],
            _ => vec![b"GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n"],
        };
        let mut segs = Vec::new();
        for r in &req {
            conv.data(&mut buf, true, r, &mut |b| segs.push(b.to_vec()));
        }
        if f % 4 == 0 {
            segs.reverse(); // out of order
        }
        if f % 5 == 1 {
            let again = segs[0].clone();
            segs.push(again); // a retransmission
        }
        pk.extend(segs);
        for k in 0..8 {
            let body: Vec<u8> = if f % 7 == 3 && k == 4 {
                b"...leaks SECRET-TOKEN here...".to_vec()
            } else {
                vec![b'a' + (k as u8 % 26); 600]
            };
            conv.data(&mut buf, false, &body, &mut |b| pk.push(b.to_vec()));
        }
        if f % 3 != 2 {
            conv.teardown(&mut buf, &mut |b| pk.push(b.to_vec()));
        }
        flows.push(pk);
    }
    // UDP exchanges, one carrying a signature.
    let udp = generate(&TrafficSpec {
        flows: 6,
        packets_per_flow: 6,
        frame_size: 200,
        proto: Proto::Udp,
        seed: 9,
        ..Default::default()
    });
    for (i, (_, f)) in udp.iter().enumerate() {
        let mut v = f.to_vec();
        if i == 7 {
            let n = v.len();
            // The UDP checksum is left stale: the data plane does not verify
            // transport checksums, and every run sees the same bytes.
            v[n - 3..].copy_from_slice(b"zzz");
        }
        flows.push(vec![v]);
    }
    // Denied and stateless packets.
    flows.push(vec![tcp_v4(
        [10, 9, 9, 9],
        [192, 0, 2, 10],
        4444,
        23,
        1,
        0,
        SYN,
        b"",
    )]);
    flows.push(vec![tcp_v4(
        [10, 9, 9, 8],
        [192, 0, 2, 10],
        4445,
        80,
        5,
        6,
        0x10,
        b"mid",
    )]);
    // Interleave flows deterministically.
    let mut rng = Rng::new(4);
    let mut out = Vec::new();
    let mut ts = 1_700_000_000_000_000_000u64;
    let mut cursors = vec![0usize; flows.len()];
    loop {
        let open: Vec<usize> = (0..flows.len())
            .filter(|&i| cursors[i] < flows[i].len())
            .collect();
        if open.is_empty() {
            break;
        }
        let f = open[rng.below(open.len() as u64) as usize];
        ts += 5_000;
        out.push((ts, flows[f][cursors[f]].clone()));
        cursors[f] += 1;
    }
    out
}

/// What one run produced: per packet (forwarded?, bytes out), alerts, flow records.
#[derive(Debug, PartialEq)]
struct Outcome {
    packets: Vec<(bool, Vec<u8>)>,
    alerts: Vec<(u32, String, bool)>,
    flows: BTreeMap<String, (u64, u64, u64, u64)>,
}

struct Instance {
    chain: Chain,
    store: Box<dyn StateStore>,
}

fn instance(store: Box<dyn StateStore>) -> Instance {
    let spec = ChainSpec::from_str(CHAIN, Path::new("any-instance.yaml")).unwrap();
    let chain = Chain::from_spec(
        &spec,
        Path::new("."),
        &sluice_builtin::registry(),
        Sharing::Shared,
    )
    .unwrap();
    Instance { chain, store }
}

fn collect(
    events: Vec<Event>,
    alerts: &mut Vec<(u32, String, bool)>,
    flows: &mut BTreeMap<String, (u64, u64, u64, u64)>,
) {
    for e in events {
        match e {
            Event::Alert(a) => alerts.push((a.sid, a.flow.to_string(), a.to_server)),
            Event::Flow(r) => {
                let prev = flows.insert(
                    r.flow.to_string(),
                    (
                        r.pkts_toserver,
                        r.pkts_toclient,
                        r.bytes_toserver,
                        r.bytes_toclient,
                    ),
                );
                assert!(prev.is_none(), "flow {} exported twice", r.flow);
            }
        }
    }
}

/// Chooses the instance of packet `i` given its frame and which instances live.
type Picker = dyn Fn(usize, &[u8], &[bool]) -> usize;

/// Runs the trace; `pick(i, frame, alive)` chooses the instance of packet `i`.
/// Consecutive packets for the same instance form one batch (up to 16), and batches
/// run in trace order, as packets would arrive. `kill` stops an instance (no flush,
/// its memory lost) after that many packets.
fn run(
    mut insts: Vec<Instance>,
    trace: &[(u64, Vec<u8>)],
    pick: &Picker,
    kill: Option<(usize, usize)>,
) -> Outcome {
    let mut alive = vec![true; insts.len()];
    let mut pool = PacketPool::new(64);
    let mut packets = vec![(false, Vec::new()); trace.len()];
    let mut alerts = Vec::new();
    let mut flows = BTreeMap::new();
    let mut i = 0;
    while i < trace.len() {
        if let Some((k, after)) = kill {
            if i >= after && alive[k] {
                alive[k] = false;
            }
        }
        let who = pick(i, &trace[i].1, &alive);
        assert!(alive[who]);
        let mut batch = Batch::with_capacity(16);
        let start = i;
        while i < trace.len() && i - start < 16 && pick(i, &trace[i].1, &alive) == who {
            if let Some((k, after)) = kill {
                if i >= after && k == who && alive[k] {
                    break;
                }
            }
            batch.push_frame(&mut pool, &trace[i].1, trace[i].0, 0);
            i += 1;
        }
        let inst = &mut insts[who];
        inst.chain.process(&mut batch, inst.store.as_mut());
        for (k, p) in batch.pkts.iter().enumerate() {
            packets[start + k] = (p.verdict == Verdict::Forward, p.data().to_vec());
        }
        batch.recycle(&mut pool);
        let ev = inst.chain.take_events();
        collect(ev, &mut alerts, &mut flows);
    }
    // End of the run: far-future timers on the survivors (so a dead instance's open
    // flows are exported by their idle timers), then every survivor flushes.
    let end = trace.last().unwrap().0 + 3_600_000_000_000;
    for (k, inst) in insts.iter_mut().enumerate() {
        if alive[k] {
            if kill.is_some() {
                inst.chain.tick(end, inst.store.as_mut());
            }
            inst.chain.flush(inst.store.as_mut());
            let ev = inst.chain.take_events();
            collect(ev, &mut alerts, &mut flows);
        }
    }
    for inst in &insts {
        assert_eq!(
            inst.chain.stats().store_errors,
            0,
            "{:?}",
            inst.chain.stats().last_error
        );
    }
    alerts.sort();
    Outcome {
        packets,
        alerts,
        flows,
    }
}

fn reference(trace: &[(u64, Vec<u8>)]) -> Outcome {
    let one = vec![instance(Box::new(LocalStore::new()))];
    run(one, trace, &|_, _, _| 0, None)
}

fn spray(seed: u64) -> impl Fn(usize, &[u8], &[bool]) -> usize {
    move |i, _, alive| {
        let n = alive.len() as u64;
        let mut r = Rng::new(seed ^ (i as u64).wrapping_mul(0x9e37_79b9));
        let mut k = r.below(n) as usize;
        while !alive[k] {
            k = (k + 1) % alive.len();
        }
        k
    }
}

/// Each flow's forward direction on one instance, its reverse on the next.
fn asymmetric(i: usize, f: &[u8], alive: &[bool]) -> usize {
    let _ = i;
    let m = parse_frame(f).map(|m| m.flow).ok();
    let (h, fwd) = match m {
        Some(fl) => {
            let (_, side) = fl.canonical();
            (
                fl.symmetric_hash() as usize,
                side == sluice_wire::flow::Side::Forward,
            )
        }
        None => (0, true),
    };
    let n = alive.len();
    let mut k = (h + if fwd { 0 } else { 1 }) % n;
    while !alive[k] {
        k = (k + 1) % n;
    }
    k
}

fn check_against_reference(make: &dyn Fn() -> Box<dyn StateStore>, flush_store: &dyn Fn()) {
    let t = trace();
    let want = reference(&t);
    assert!(
        want.alerts.len() >= 4,
        "the trace exercises the IPS: {:?}",
        want.alerts
    );
    assert!(want.packets.iter().any(|p| !p.0), "and drops");
    assert!(want.flows.len() >= 24);
    for n in [2usize, 3, 4] {
        flush_store();
        let got = run(
            (0..n).map(|_| instance(make())).collect(),
            &t,
            &spray(n as u64),
            None,
        );
        assert_eq!(got, want, "{n} instances, sprayed");
        flush_store();
        let got = run(
            (0..n).map(|_| instance(make())).collect(),
            &t,
            &asymmetric,
            None,
        );
        assert_eq!(got, want, "{n} instances, asymmetric");
    }
    // An instance dies a third of the way in; the others take its packets.
    flush_store();
    let got = run(
        (0..3).map(|_| instance(make())).collect(),
        &t,
        &spray(7),
        Some((1, t.len() / 3)),
    );
    assert_eq!(
        got.packets, want.packets,
        "no verdict changes when an instance dies"
    );
    assert_eq!(got.alerts, want.alerts);
    assert_eq!(
        got.flows, want.flows,
        "every flow is still exported once, with exact counts"
    );
}

#[test]
fn standalone_redis_instances_behave_as_one() {
    let srv = RedisServer::start(&[]).expect("start redis-server");
    let url = srv.url();
    let port = srv.port();
    check_against_reference(&|| Box::new(RedisStore::open(&url).unwrap()), &|| {
        flushall(port).unwrap()
    });
}

#[test]
fn cluster_instances_behave_as_one() {
    let cluster = RedisCluster::start(3).expect("start a 3-node cluster");
    let url = cluster.url();
    let ports: Vec<u16> = cluster.nodes.iter().map(|n| n.port()).collect();
    check_against_reference(&|| Box::new(ClusterStore::open(&url).unwrap()), &|| {
        for &p in &ports {
            flushall(p).unwrap();
        }
    });
}
