//! The harness of the header-rewriting tests (`any_instance_rewrite.rs`,
//! `cached_rewrite.rs`): a NAT and an LB chain, TCP, UDP and ping
//! conversations between clients and servers, built packet by packet so each
//! side's frames follow what the other side saw (addresses and ports as
//! rewritten by NAT or LB), and runs of them through instances. Includers also
//! declare `mod steering;`.

// Each test binary uses a different part of this module.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;

use sluice_chain::{Chain, ChainSpec, Pipeline, Sharing};
use sluice_nf::Verdict;
use sluice_packet::{Batch, PacketPool};
use sluice_state::StateStore;
use sluice_trafficgen::Rng;
use sluice_wire::build::{tcp_repr, write_frame, Transport};
use sluice_wire::icmp::IcmpRepr;
use sluice_wire::parse::parse_frame;
use sluice_wire::rewrite::verify_all_checksums;
use sluice_wire::tcp::flags::{ACK, FIN, PSH, SYN};
use sluice_wire::udp::UdpRepr;
use sluice_wire::IpAddr;

use crate::steering::{At, Plan};

/// NAT from inside 10/8 to a pool of public addresses and ports.
pub const NAT_CHAIN: &str = r#"
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

/// A maglev and a least-connections service, the first translating ports.
pub const LB_CHAIN: &str = r#"
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

/// The servers of the NAT conversations (a DNS server and a web server).
pub const NAT_SERVERS: [(IpAddr, u16); 2] = [
    (IpAddr::V4([192, 0, 2, 53]), 53),
    (IpAddr::V4([198, 18, 0, 1]), 80),
];

/// The servers of the LB conversations: its two VIPs.
pub const LB_SERVERS: [(IpAddr, u16); 2] = [
    (IpAddr::V4([192, 0, 2, 100]), 80),
    (IpAddr::V4([192, 0, 2, 101]), 80),
];

#[derive(Clone, Copy, PartialEq)]
pub enum Kind {
    Tcp,
    Udp,
    Ping,
}

/// One packet of a conversation, from the client (outbound) or the server.
#[derive(Clone)]
pub struct Step {
    pub flow: usize,
    pub outbound: bool,
    pub flags: u8,
    pub payload: Vec<u8>,
}

#[derive(Clone)]
pub struct Flow {
    pub kind: Kind,
    pub client: (IpAddr, u16),
    pub server: (IpAddr, u16),
    pub cseq: u32,
    pub sseq: u32,
}

pub fn conversations(servers: &[(IpAddr, u16)], n: usize) -> (Vec<Flow>, Vec<Step>) {
    let mut flows = Vec::new();
    let mut per: Vec<Vec<Step>> = Vec::new();
    for f in 0..n {
        let kind = match f % 5 {
            3 => Kind::Udp,
            4 => Kind::Ping,
            _ => Kind::Tcp,
        };
        let client = (
            IpAddr::V4([10, 4, (f / 200) as u8, (f % 200) as u8 + 1]),
            40_000 + f as u16,
        );
        let server = servers[f % servers.len()];
        flows.push(Flow {
            kind,
            client,
            server,
            cseq: 1000 * f as u32 + 1,
            sseq: 50_000 + 7 * f as u32,
        });
        let st = |outbound, flags, payload: &[u8]| Step {
            flow: f,
            outbound,
            flags,
            payload: payload.to_vec(),
        };
        let steps = match kind {
            Kind::Tcp => vec![
                st(true, SYN, b""),
                st(false, SYN | ACK, b""),
                st(true, ACK, b""),
                st(true, ACK | PSH, b"GET / HTTP/1.1\r\n\r\n"),
                st(false, ACK | PSH, &[b'r'; 700]),
                st(false, ACK | PSH, &[b's'; 300]),
                st(true, FIN | ACK, b""),
                st(false, FIN | ACK, b""),
                st(true, ACK, b""),
            ],
            Kind::Udp => vec![
                st(true, 0, b"query"),
                st(false, 0, b"answer"),
                st(true, 0, b"again"),
            ],
            Kind::Ping => vec![st(true, 1, b"ping"), st(false, 0, b"ping")],
        };
        per.push(steps);
    }
    // Interleave deterministically, keeping each conversation's order.
    let mut rng = Rng::new(11);
    let mut cur = vec![0usize; n];
    let mut out = Vec::new();
    loop {
        let open: Vec<usize> = (0..n).filter(|&i| cur[i] < per[i].len()).collect();
        if open.is_empty() {
            break;
        }
        let f = open[rng.below(open.len() as u64) as usize];
        out.push(per[f][cur[f]].clone());
        cur[f] += 1;
    }
    (flows, out)
}

/// Builds a step's frame. Server packets go to `seen`, the client as the server saw
/// it, from the server the client's packet actually reached.
pub fn frame(f: &mut Flow, s: &Step, seen: Option<Pair>) -> Vec<u8> {
    let (src, dst) = if s.outbound {
        (f.client, f.server)
    } else {
        let (c, srv) = seen.unwrap_or((f.client, f.server));
        (srv, c)
    };
    let mut buf = vec![0u8; 2048];
    let t = match f.kind {
        Kind::Tcp => {
            let (seq, ack) = if s.outbound {
                (f.cseq, f.sseq)
            } else {
                (f.sseq, f.cseq)
            };
            let t = tcp_repr(
                src.1,
                dst.1,
                seq,
                if s.flags & ACK != 0 { ack } else { 0 },
                s.flags,
            );
            let adv = s.payload.len() as u32 + (s.flags & (SYN | FIN) != 0) as u32;
            if s.outbound {
                f.cseq = f.cseq.wrapping_add(adv);
            } else {
                f.sseq = f.sseq.wrapping_add(adv);
            }
            Transport::Tcp(t)
        }
        Kind::Udp => Transport::Udp(UdpRepr {
            src_port: src.1,
            dst_port: dst.1,
        }),
        Kind::Ping => Transport::Icmp(IcmpRepr::echo(
            false,
            s.outbound,
            if s.outbound { src.1 } else { dst.1 },
            1,
        )),
    };
    let n = write_frame(&mut buf, src.0, dst.0, t, &s.payload).unwrap();
    buf.truncate(n);
    buf
}

pub fn endpoints(frame: &[u8]) -> Option<Pair> {
    let m = parse_frame(frame).ok()?;
    Some(((m.flow.src, m.flow.src_port), (m.flow.dst, m.flow.dst_port)))
}

/// (client, server) endpoints as one side saw them.
pub type Pair = ((IpAddr, u16), (IpAddr, u16));

/// What one run produced.
#[derive(Debug)]
pub struct Outcome {
    /// Per step: (forwarded?, bytes out).
    pub packets: Vec<(bool, Vec<u8>)>,
    /// Flow records (flow and source address), sorted.
    pub records: Vec<String>,
    /// Forwarded packets whose bytes the chain changed.
    pub rewritten: usize,
    /// Cache hits of every instance.
    pub hits: u64,
    /// Claims the instances' caches decided in pipelined mode.
    pub local_swaps: u64,
}

/// One instance: its chain, its store handle and, pipelined, its pipeline.
pub struct Inst {
    pub chain: Chain,
    pub store: Box<dyn StateStore>,
    /// Pipelined mode: batches tagged with their first step and inputs.
    pub pipe: Option<Pipeline<Tag>>,
}

/// A batch's first step, the flow of each packet and its input bytes.
pub type Tag = (usize, Vec<usize>, Vec<Vec<u8>>);

/// Instances of `chain`, one on each of `stores`.
pub fn instances(chain: &str, stores: Vec<Box<dyn StateStore>>) -> Vec<Inst> {
    let spec = ChainSpec::from_str(chain, Path::new("rewrite.yaml")).unwrap();
    let reg = sluice_builtin::registry();
    stores
        .into_iter()
        .map(|store| Inst {
            chain: Chain::from_spec(&spec, Path::new("."), &reg, Sharing::Shared).unwrap(),
            store,
            pipe: None,
        })
        .collect()
}

/// What the run observed so far.
struct Seen {
    seen: HashMap<usize, Pair>,
    packets: Vec<Option<(bool, Vec<u8>)>>,
    rewritten: usize,
}

impl Seen {
    fn record(&mut self, steps: &[Step], batch: &Batch, tag: &Tag) {
        let (first, flows_in, inputs) = tag;
        for (k, p) in batch.pkts.iter().enumerate() {
            let fl = flows_in[k];
            let fwd = p.verdict == Verdict::Forward;
            let step = &steps[first + k];
            if fwd && step.outbound && !self.seen.contains_key(&fl) {
                self.seen.insert(fl, endpoints(p.data()).unwrap());
            }
            if fwd && p.data() != &inputs[k][..] {
                self.rewritten += 1;
            }
            self.packets[first + k] = Some((fwd, p.data().to_vec()));
        }
    }
}

/// Releases what `inst`'s pipeline freed (everything, if `all`).
fn drain(inst: &mut Inst, steps: &[Step], seen: &mut Seen, pool: &mut PacketPool, all: bool) {
    let Some(p) = inst.pipe.as_mut() else {
        return;
    };
    if all {
        p.flush(&mut inst.chain, inst.store.as_mut());
        assert_eq!(p.lost_batches(), 0, "no held write failed");
    }
    while let Some((mut b, tag)) = p.pop() {
        seen.record(steps, &b, &tag);
        b.recycle(pool);
    }
}

/// Runs 60 conversations with `servers` through `insts`, in batches of up to 16
/// steps for the same instance (`plan` steers them, and may change leases or
/// kill an instance at batch starts); a server's packets are built once the
/// chain has shown it what it answers. Checks that every forwarded packet's
/// checksums verify and that replies reach the client from where it sent.
pub fn run(mut insts: Vec<Inst>, servers: &[(IpAddr, u16)], plan: &mut Plan<'_, Inst>) -> Outcome {
    let (mut flows, steps) = conversations(servers, 60);
    let mut alive = vec![true; insts.len()];
    let mut seen = Seen {
        seen: HashMap::new(),
        packets: vec![None; steps.len()],
        rewritten: 0,
    };
    let mut pool = PacketPool::new(4096);
    let mut records = Vec::new();
    let mut ts = 1_000_000_000u64;
    let mut i = 0;
    while i < steps.len() {
        let mut batch = Batch::with_capacity(16);
        let mut flows_in: Vec<usize> = Vec::new();
        let mut inputs: Vec<Vec<u8>> = Vec::new();
        let mut who = None;
        while i < steps.len() && batch.len() < 16 {
            let s = &steps[i];
            if !s.outbound && !seen.seen.contains_key(&s.flow) {
                if flows_in.contains(&s.flow) {
                    break;
                }
                // A reply built from a translation still in a pipeline: wait
                // for it, as a server waits for the request.
                for (k, inst) in insts.iter_mut().enumerate() {
                    if alive[k] {
                        drain(inst, &steps, &mut seen, &mut pool, true);
                    }
                }
            }
            let f = frame(&mut flows[s.flow], s, seen.seen.get(&s.flow).copied());
            let w = if who.is_none() {
                plan(At::Start(i), &f, &mut insts, &mut alive)
            } else {
                let mut probe = alive.clone();
                plan(At::Fill(i), &f, &mut [], &mut probe)
            };
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
        assert!(alive[w], "a dead instance gets no packets");
        // Shared objects (the NAT's port pool, least-connections loads) hand
        // out in processing order: keep it the trace's, as one instance would,
        // by draining the others' pipelines before this one takes a batch.
        for (k, inst) in insts.iter_mut().enumerate() {
            if k != w && alive[k] && inst.pipe.as_ref().is_some_and(|p| p.in_flight() > 0) {
                drain(inst, &steps, &mut seen, &mut pool, true);
            }
        }
        let inst = &mut insts[w];
        let tag = (i - batch.len(), flows_in, inputs);
        match inst.pipe.as_mut() {
            Some(p) => {
                p.push(&mut inst.chain, inst.store.as_mut(), batch, tag);
                drain(inst, &steps, &mut seen, &mut pool, false);
            }
            None => {
                inst.chain.process(&mut batch, inst.store.as_mut());
                seen.record(&steps, &batch, &tag);
                batch.recycle(&mut pool);
            }
        }
        for e in inst.chain.take_events() {
            records.push(e.to_eve()["flow"].to_string() + &e.to_eve()["src_ip"].to_string());
        }
    }
    // Every pipeline drained before any instance's end-of-run flush reads
    // what the others wrote.
    for (k, inst) in insts.iter_mut().enumerate() {
        if alive[k] {
            drain(inst, &steps, &mut seen, &mut pool, true);
        }
    }
    let (mut hits, mut local_swaps) = (0, 0);
    for (k, inst) in insts.iter_mut().enumerate() {
        if !alive[k] {
            continue;
        }
        hits += inst.chain.cache_stats().map_or(0, |c| c.hits);
        local_swaps += inst.chain.cache_stats().map_or(0, |c| c.local_swaps);
        inst.chain.flush(inst.store.as_mut());
        for e in inst.chain.take_events() {
            records.push(e.to_eve()["flow"].to_string() + &e.to_eve()["src_ip"].to_string());
        }
        assert_eq!(
            inst.chain.stats().store_errors,
            0,
            "{:?}",
            inst.chain.stats().last_error
        );
    }
    records.sort();
    // What the client sees must come from where it sent, and verify.
    let packets: Vec<(bool, Vec<u8>)> = seen
        .packets
        .into_iter()
        .map(|p| p.unwrap_or((false, Vec::new())))
        .collect();
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
        rewritten: seen.rewritten,
        hits,
        local_swaps,
    }
}

/// The flow state before `s` was built (undo its sequence advance).
pub fn rewind(f: &Flow, s: &Step) -> Flow {
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

/// Asserts equal outcomes, naming the first difference.
pub fn same(got: &Outcome, want: &Outcome, what: &str) {
    assert_eq!(got.packets.len(), want.packets.len(), "{what}");
    for (i, (g, w)) in got.packets.iter().zip(&want.packets).enumerate() {
        assert!(
            g == w,
            "{what}: packet {i} differs: {:?} {:?} vs {:?} {:?}",
            g.0,
            endpoints(&g.1),
            w.0,
            endpoints(&w.1)
        );
    }
    assert_eq!(got.rewritten, want.rewritten, "{what}");
    let extra: Vec<_> = got
        .records
        .iter()
        .filter(|r| !want.records.contains(r))
        .collect();
    let missing: Vec<_> = want
        .records
        .iter()
        .filter(|r| !got.records.contains(r))
        .collect();
    assert!(
        got.records == want.records,
        "{what}: flow records differ: extra {extra:?}, missing {missing:?}"
    );
}
