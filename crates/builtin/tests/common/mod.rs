//! The harness of `any_instance.rs` and `cached_instances.rs`: a firewall, IPS
//! and monitor chain, a trace exercising it, and runs of that trace through
//! instances, compared with one instance with local state. Includers also
//! declare `mod steering;`.

// Each test binary uses a different part of this module.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;

use sluice_chain::{Chain, ChainSpec, Pipeline, Sharing};
use sluice_nf::{Event, Verdict};
use sluice_packet::{Batch, PacketPool};
use sluice_state::{LocalStore, StateStore};
use sluice_trafficgen::{generate, Endpoints, Proto, Rng, TcpConversation, TrafficSpec};
use sluice_wire::build::tcp_v4;
use sluice_wire::tcp::flags::SYN;
use sluice_wire::IpAddr;

use crate::steering::{At, Plan};

pub const CHAIN: &str = r#"
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
      - 'alert http any any -> any any (msg:"body across segments"; flow:to_client; http.response_body; content:"aaaaaaaabbbbbbbb"; sid:4; rev:1;)'
  - type: monitor
settings:
  batch_size: 16
"#;

/// The test traffic: long-lived TCP flows with handshakes and teardowns, UDP flows,
/// signatures split across segments (in and out of order), retransmissions, denied
/// connections and mid-stream packets without state.
pub fn trace() -> Vec<(u64, Vec<u8>)> {
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
        if f % 6 == 2 {
            // An HTTP response: its body (the segments below) accumulates in
            // the store from packet to packet, wherever each one lands.
            let head = b"HTTP/1.1 200 OK\r\nContent-Length: 4800\r\n\r\n";
            conv.data(&mut buf, false, head, &mut |b| pk.push(b.to_vec()));
        }
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
pub struct Outcome {
    pub packets: Vec<(bool, Vec<u8>)>,
    pub alerts: Vec<(u32, String, bool)>,
    pub flows: BTreeMap<String, (u64, u64, u64, u64)>,
}

/// One instance: its chain, its store handle and, pipelined, its pipeline.
pub struct Instance {
    pub chain: Chain,
    pub store: Box<dyn StateStore>,
    /// Pipelined mode (docs/STATE.md, "Pipelining"): batches go through a
    /// pipeline of this instance, tagged with their first packet's index.
    pub pipe: Option<Pipeline<usize>>,
    /// Batches the pipeline released, not yet recorded.
    pub done: Vec<(Batch, usize)>,
}

impl Instance {
    /// This instance in pipelined mode, with windows of `window` batches.
    pub fn pipelined(mut self, window: usize) -> Instance {
        self.pipe = Some(Pipeline::new(&mut self.chain, self.store.as_mut(), window));
        self
    }

    /// Processes (or, pipelined, accepts) a batch starting at packet `start`.
    pub fn take(&mut self, mut batch: Batch, start: usize) {
        match self.pipe.as_mut() {
            Some(p) => p.push(&mut self.chain, self.store.as_mut(), batch, start),
            None => {
                self.chain.process(&mut batch, self.store.as_mut());
                self.done.push((batch, start));
            }
        }
        self.collect_released();
    }

    fn collect_released(&mut self) {
        if let Some(p) = self.pipe.as_mut() {
            while let Some(b) = p.pop() {
                self.done.push(b);
            }
        }
    }

    /// Everything accepted is processed and released (before a lease changes:
    /// a pipelined instance gives up a range only with nothing in flight).
    pub fn settle(&mut self) {
        if let Some(p) = self.pipe.as_mut() {
            p.flush(&mut self.chain, self.store.as_mut());
            assert_eq!(p.lost_batches(), 0, "no held write failed");
        }
        self.collect_released();
    }
}

/// An instance of the chain `text` on `store`.
pub fn instance_of(text: &str, store: Box<dyn StateStore>) -> Instance {
    let spec = ChainSpec::from_str(text, Path::new("chain.yaml")).unwrap();
    let chain = Chain::from_spec(
        &spec,
        Path::new("."),
        &sluice_builtin::registry(),
        Sharing::Shared,
    )
    .unwrap();
    Instance {
        chain,
        store,
        pipe: None,
        done: Vec::new(),
    }
}

/// An instance of [`CHAIN`] on `store`.
pub fn instance(store: Box<dyn StateStore>) -> Instance {
    instance_of(CHAIN, store)
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

/// Records the packets of the batches `inst` released.
fn record(inst: &mut Instance, packets: &mut [(bool, Vec<u8>)], pool: &mut PacketPool) {
    for (mut batch, start) in inst.done.drain(..) {
        for (k, p) in batch.pkts.iter().enumerate() {
            packets[start + k] = (p.verdict == Verdict::Forward, p.data().to_vec());
        }
        batch.recycle(pool);
    }
}

/// Runs the trace in batches of up to 16 consecutive packets for the same
/// instance, in trace order, as packets would arrive; `plan` steers them (and
/// may change leases or kill an instance at batch starts). At the end, the
/// survivors give up their leases, tick far into the future if an instance
/// died (so its open flows are exported by their idle timers), and flush.
pub fn run(
    mut insts: Vec<Instance>,
    trace: &[(u64, Vec<u8>)],
    plan: &mut Plan<'_, Instance>,
) -> Outcome {
    let mut alive = vec![true; insts.len()];
    let mut pool = PacketPool::new(8192);
    let mut packets = vec![(false, Vec::new()); trace.len()];
    let mut alerts = Vec::new();
    let mut flows = BTreeMap::new();
    let mut i = 0;
    while i < trace.len() {
        let who = plan(At::Start(i), &trace[i].1, &mut insts, &mut alive);
        assert!(alive[who]);
        let mut batch = Batch::with_capacity(16);
        let start = i;
        batch.push_frame(&mut pool, &trace[i].1, trace[i].0, 0);
        i += 1;
        while i < trace.len() && i - start < 16 {
            // Peek without side effects: leases change only at batch starts.
            let mut probe_alive = alive.clone();
            let next = plan(At::Fill(i), &trace[i].1, &mut [], &mut probe_alive);
            if next != who {
                break;
            }
            batch.push_frame(&mut pool, &trace[i].1, trace[i].0, 0);
            i += 1;
        }
        let inst = &mut insts[who];
        inst.take(batch, start);
        record(inst, &mut packets, &mut pool);
        let ev = inst.chain.take_events();
        collect(ev, &mut alerts, &mut flows);
    }
    for (k, inst) in insts.iter_mut().enumerate() {
        if alive[k] {
            inst.settle();
            record(inst, &mut packets, &mut pool);
        }
    }
    let end = trace.last().unwrap().0 + 3_600_000_000_000;
    let killed = alive.iter().any(|a| !a);
    let hits: u64 = insts
        .iter()
        .filter_map(|i| i.chain.cache_stats())
        .map(|c| c.hits)
        .sum();
    CACHE_HITS.with(|h| h.set(h.get() + hits));
    for c in insts.iter().filter_map(|i| i.chain.cache_stats()) {
        HELD_AND_FILLS.with(|h| {
            let (a, b) = h.get();
            h.set((a + c.held, b + c.prefetch_fills));
        });
    }
    // Shutting down: every instance gives up its lease (its deferred writes
    // reach the store) before any exports what it holds, as one instance's
    // export may read a flow another owned last.
    for (k, inst) in insts.iter_mut().enumerate() {
        if alive[k] && inst.chain.ownership().is_some() {
            inst.chain.set_ownership(None, inst.store.as_mut()).unwrap();
        }
    }
    for (k, inst) in insts.iter_mut().enumerate() {
        if alive[k] {
            if killed {
                inst.chain.tick(end, inst.store.as_mut());
            }
            inst.chain.flush(inst.store.as_mut());
            let ev = inst.chain.take_events();
            collect(ev, &mut alerts, &mut flows);
        }
    }
    for (k, inst) in insts.iter().enumerate() {
        if alive[k] {
            assert_eq!(
                inst.chain.stats().store_errors,
                0,
                "{:?}",
                inst.chain.stats().last_error
            );
        }
    }
    alerts.sort();
    Outcome {
        packets,
        alerts,
        flows,
    }
}

thread_local! {
    /// Cache hits of the runs so far on this test's thread (to show the cache is used).
    pub static CACHE_HITS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Operations held and prefetched results used by pipelined runs so far.
    pub static HELD_AND_FILLS: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// The trace through one instance with local state: what the others must match.
pub fn reference(trace: &[(u64, Vec<u8>)]) -> Outcome {
    let one = vec![instance(Box::new(LocalStore::new()))];
    run(one, trace, &mut |_, _, _, _| 0)
}
