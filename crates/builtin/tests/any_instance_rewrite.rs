//! "Any packet to any instance" for the header-rewriting functions (NAT and the
//! load balancer): the server side answers the addresses the chain actually sent
//! (the NAT's public address and port, the backend the LB chose), so the trace is
//! built as it is processed. One instance with local state and 2-4 instances
//! sharing Redis, sprayed and asymmetric, must produce identical bytes, and every
//! return packet must come back to the client from the address it first contacted,
//! with checksums that verify.

use std::collections::HashMap;
use std::path::Path;

use sluice_chain::{Chain, ChainSpec, Sharing};
use sluice_nf::Verdict;
use sluice_packet::{Batch, PacketPool};
use sluice_state::{LocalStore, StateStore};
use sluice_state_redis::server::RedisServer;
use sluice_state_redis::RedisStore;
use sluice_trafficgen::Rng;
use sluice_wire::parse::parse_frame;
use sluice_wire::rewrite::verify_all_checksums;
use sluice_wire::tcp::flags::{FIN, SYN};
use sluice_wire::IpAddr;

const NAT_CHAIN: &str = r#"
name: rewrite-nat
functions:
  - type: firewall
    rules: |
      allow tcp from 10.0.0.0/8 to any
      allow udp from 10.0.0.0/8 to any
      allow icmp from 10.0.0.0/8 to any
      default deny
  - type: nat
    inside: ["10.0.0.0/8"]
    pool: ["203.0.113.8/30"]
    ports: "2000-2999"
  - type: monitor
settings:
  batch_size: 16
  # Replies cross monitor, NAT, then firewall: the firewall sees them restored.
  forward_sources: ["10.0.0.0/8"]
"#;

const LB_CHAIN: &str = r#"
name: rewrite-lb
functions:
  - type: lb
    services:
      - vip: 192.0.2.100
        port: 80
        algorithm: maglev
        backends:
          - { addr: "198.51.100.1:8080", weight: 1 }
          - { addr: "198.51.100.2:8080", weight: 2 }
          - { addr: "198.51.100.3:8080", weight: 1 }
      - vip: 192.0.2.101
        port: 80
        algorithm: least_connections
        backends:
          - { addr: "198.51.100.4", weight: 1 }
          - { addr: "198.51.100.5", weight: 1 }
  - type: monitor
settings:
  batch_size: 16
"#;

mod rewrite_traffic;
use rewrite_traffic::*;

#[derive(Debug, PartialEq)]
struct Outcome {
    packets: Vec<(bool, Vec<u8>)>,
    records: Vec<String>,
    /// Forwarded packets whose bytes the chain changed.
    rewritten: usize,
}

type Picker = dyn Fn(usize, &[u8], &[bool]) -> usize;

fn run(
    chain: &str,
    mut stores: Vec<Box<dyn StateStore>>,
    servers: &[(IpAddr, u16)],
    pick: &Picker,
) -> Outcome {
    let spec = ChainSpec::from_str(chain, Path::new("rewrite.yaml")).unwrap();
    let reg = sluice_builtin::registry();
    let mut chains: Vec<Chain> = stores
        .iter()
        .map(|_| Chain::from_spec(&spec, Path::new("."), &reg, Sharing::Shared).unwrap())
        .collect();
    let (mut flows, steps) = conversations(servers, 60);
    let alive = vec![true; stores.len()];
    // The client and server as the far side saw them, per flow, from the first
    // forwarded outbound packet.
    let mut seen: HashMap<usize, Pair> = HashMap::new();
    let mut pool = PacketPool::new(64);
    let mut packets = Vec::new();
    let mut records = Vec::new();
    let mut ts = 1_000_000_000u64;
    let mut rewritten = 0;
    let mut i = 0;
    while i < steps.len() {
        let mut batch = Batch::with_capacity(16);
        let mut flows_in: Vec<usize> = Vec::new();
        let mut inputs: Vec<Vec<u8>> = Vec::new();
        let mut who = None;
        while i < steps.len() && batch.len() < 16 {
            let s = &steps[i];
            // A server packet is built only once the chain has shown what it answers.
            if !s.outbound && !seen.contains_key(&s.flow) && flows_in.contains(&s.flow) {
                break;
            }
            let f = frame(&mut flows[s.flow], s, seen.get(&s.flow).copied());
            let w = pick(i, &f, &alive);
            if *who.get_or_insert(w) != w {
                // Undo the sequence advance: the packet is rebuilt in the next batch.
                flows[s.flow] = rewind(&flows[s.flow], s);
                break;
            }
            ts += 10_000;
            batch.push_frame(&mut pool, &f, ts, 0);
            inputs.push(f);
            flows_in.push(s.flow);
            i += 1;
        }
        let w = who.unwrap();
        chains[w].process(&mut batch, stores[w].as_mut());
        for (k, p) in batch.pkts.iter().enumerate() {
            let fl = flows_in[k];
            let fwd = p.verdict == Verdict::Forward;
            let step = &steps[i - batch.len() + k];
            if fwd && step.outbound && !seen.contains_key(&fl) {
                seen.insert(fl, endpoints(p.data()).unwrap());
            }
            if fwd && p.data() != &inputs[k][..] {
                rewritten += 1;
            }
            packets.push((fwd, p.data().to_vec()));
        }
        batch.recycle(&mut pool);
        for e in chains[w].take_events() {
            records.push(e.to_eve()["flow"].to_string() + &e.to_eve()["src_ip"].to_string());
        }
    }
    for (c, s) in chains.iter_mut().zip(stores.iter_mut()) {
        c.flush(s.as_mut());
        for e in c.take_events() {
            records.push(e.to_eve()["flow"].to_string() + &e.to_eve()["src_ip"].to_string());
        }
        assert_eq!(c.stats().store_errors, 0, "{:?}", c.stats().last_error);
    }
    records.sort();
    // What the client sees must come from where it sent, and verify.
    for (s, (fwd, bytes)) in steps.iter().zip(&packets) {
        if *fwd {
            assert!(verify_all_checksums(bytes), "checksums after rewriting");
            if !s.outbound {
                let f = &flows[s.flow];
                let (src, dst) = endpoints(bytes).unwrap();
                assert_eq!(dst.0, f.client.0, "return traffic restored to the client");
                assert_eq!(src.0, f.server.0, "from the address the client contacted");
                if f.kind != Kind::Ping {
                    assert_eq!((src.1, dst.1), (f.server.1, f.client.1));
                }
            }
        }
    }
    Outcome {
        packets,
        records,
        rewritten,
    }
}

/// The flow state before `s` was built (undo its sequence advance).
fn rewind(f: &Flow, s: &Step) -> Flow {
    let mut g = f.clone();
    if g.kind == Kind::Tcp {
        let adv = s.payload.len() as u32 + (s.flags & (SYN | FIN) != 0) as u32;
        if s.outbound {
            g.cseq = g.cseq.wrapping_sub(adv);
        } else {
            g.sseq = g.sseq.wrapping_sub(adv);
        }
    }
    g
}

fn spray(seed: u64) -> impl Fn(usize, &[u8], &[bool]) -> usize {
    move |i, _, alive| {
        Rng::new(seed ^ (i as u64).wrapping_mul(0x9e37_79b9)).below(alive.len() as u64) as usize
    }
}

/// Packets from the inside (10/8) on one instance, from the outside on another.
fn asymmetric(_: usize, f: &[u8], alive: &[bool]) -> usize {
    let inside = parse_frame(f)
        .map(|m| m.flow.src.as_bytes()[0] == 10)
        .unwrap_or(true);
    usize::from(!inside) % alive.len()
}

/// `rewritten`: how many packets the chain must translate (the LB's services are
/// TCP, so it leaves UDP and pings to a VIP alone).
fn check(chain: &str, servers: &[(IpAddr, u16)], rewritten: usize) {
    let srv = RedisServer::start(&[]).expect("start redis-server");
    let want = run(
        chain,
        vec![Box::new(LocalStore::new())],
        servers,
        &|_, _, _| 0,
    );
    let passed = want.packets.iter().filter(|p| p.0).count();
    assert_eq!(want.packets.len(), 384);
    assert!(
        passed == want.packets.len(),
        "every packet of these conversations passes: {passed}"
    );
    assert_eq!(want.rewritten, rewritten, "translated packets");
    assert!(
        want.records.len() >= 60,
        "every conversation is exported: {}",
        want.records.len()
    );
    for n in [2usize, 3, 4] {
        for (name, pick) in [
            ("sprayed", &spray(n as u64) as &Picker),
            ("asymmetric", &asymmetric as &Picker),
        ] {
            let stores: Vec<Box<dyn StateStore>> = (0..n)
                .map(|_| Box::new(RedisStore::open(&srv.url()).unwrap()) as Box<dyn StateStore>)
                .collect();
            let got = run(chain, stores, servers, pick);
            assert_eq!(got, want, "{n} instances, {name}");
            let mut admin = RedisStore::open(&srv.url()).unwrap();
            flush(&mut admin, srv.port());
        }
    }
}

fn flush(_: &mut RedisStore, port: u16) {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.write_all(b"FLUSHALL\r\n").unwrap();
    let mut b = [0u8; 8];
    let _ = c.read(&mut b).unwrap();
}

#[test]
fn nat_instances_behave_as_one() {
    let servers = [
        (IpAddr::V4([192, 0, 2, 53]), 53),
        (IpAddr::V4([198, 18, 0, 1]), 80),
    ];
    check(NAT_CHAIN, &servers, 384);
}

#[test]
fn lb_instances_behave_as_one() {
    let servers = [
        (IpAddr::V4([192, 0, 2, 100]), 80),
        (IpAddr::V4([192, 0, 2, 101]), 80),
    ];
    check(LB_CHAIN, &servers, 324);
}
