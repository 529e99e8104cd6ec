//! Results do not depend on how packets are batched (issue 19, item 2): traces
//! with pauses around every idle timeout of the chain (just below, on, just
//! above, far above), many TCP and UDP flows interleaved, run with batch sizes
//! 1, 2, 7, 32 and 256 and pipelined with windows of 1, 16, 64 and 256 packets,
//! must forward the same frames, drop the same packets for the same reasons,
//! and export the same flow records and alerts.

use std::path::Path;

use sluice_chain::{Chain, ChainSpec, Pipeline, Sharing};
use sluice_nf::{Event, Verdict};
use sluice_packet::{Batch, PacketPool};
use sluice_state::{LocalStore, Ownership, StateStore};
use sluice_trafficgen::{idle_trace, IdleSpec, Trace};
use sluice_wire::parse::parse_frame;
use sluice_wire::rewrite::{set_endpoint, Endpoint};
use sluice_wire::{FlowKey, IpAddr};

const S: u64 = 1_000_000_000;

/// Firewall, IPS (with reassembly) and monitor, with short timeouts so the
/// trace's pauses straddle every one of them.
const CHAIN: &str = r#"
name: batching
functions:
  - type: firewall
    rules: |
      allow tcp from 10.0.0.0/8 to 192.0.2.0/24 port 80
      allow udp from 10.0.0.0/8 to 192.0.2.0/24
      default deny
    timeouts: { tcp_syn: 3, tcp_established: 8, tcp_closing: 4, tcp_time_wait: 2, tcp_closed: 2, udp: 5 }
    refresh_ms: 700
  - type: ips
    idle_timeout_secs: 7
    rules:
      - 'alert tcp any any -> any 80 (msg:"attack"; content:"/etc/passwd"; sid:1; rev:1;)'
      - 'alert udp any any -> any any (msg:"udp sig"; content:"zzz"; sid:3; rev:1;)'
  - type: monitor
    idle_timeout_secs: 6
    close_linger_ms: 1500
reassembly: { idle_timeout_secs: 9 }
settings:
  batch_size: 32
  timer_interval_ms: 300
"#;

/// Everything a run produced that must not depend on batching.
#[derive(Debug, PartialEq)]
struct Outcome {
    /// Per packet: forwarded (with its bytes) or the drop reason.
    packets: Vec<Result<Vec<u8>, &'static str>>,
    /// Flow records: (flow, start, end, pkts and bytes both ways, reason), sorted.
    flows: Vec<(String, u64, u64, [u64; 4], &'static str)>,
    /// Alerts: (sid, flow, packet time), sorted.
    alerts: Vec<(u32, String, u64)>,
    /// The chain's own counters: packets, forwarded, dropped, per stage in/out.
    stats: (u64, u64, u64, Vec<(u64, u64)>),
}

fn chain(text: &str) -> Chain {
    let spec = ChainSpec::from_str(text, Path::new("chain.yaml")).unwrap();
    Chain::from_spec(
        &spec,
        Path::new("."),
        &sluice_builtin::registry(),
        Sharing::Shared,
    )
    .unwrap()
}

fn collect(events: Vec<Event>, out: &mut Outcome) {
    for e in events {
        match e {
            Event::Flow(r) => out.flows.push((
                r.flow.to_string(),
                r.start_ns,
                r.end_ns,
                [
                    r.pkts_toserver,
                    r.pkts_toclient,
                    r.bytes_toserver,
                    r.bytes_toclient,
                ],
                r.reason,
            )),
            Event::Alert(a) => out.alerts.push((a.sid, a.flow.to_string(), a.ts_ns)),
        }
    }
}

/// Runs `trace` through the chain in batches of `batch` packets, pipelined
/// with windows of `window` packets if given (with an ownership lease, as
/// `sluice run --pipeline` does).
fn run(text: &str, trace: &Trace, batch: usize, window: Option<usize>) -> Outcome {
    let mut ch = chain(text);
    let mut store: Box<dyn StateStore> = Box::new(LocalStore::new());
    let mut pipe: Option<Pipeline<usize>> = window.map(|w| {
        ch.set_ownership(Some(Ownership::all(1, u64::MAX)), store.as_mut())
            .unwrap();
        Pipeline::new(&mut ch, store.as_mut(), (w / batch).max(1))
    });
    let mut pool = PacketPool::new(trace.len() + 16);
    let mut out = Outcome {
        packets: vec![Err("never"); trace.len()],
        flows: Vec::new(),
        alerts: Vec::new(),
        stats: (0, 0, 0, Vec::new()),
    };
    let record = |b: &Batch, start: usize, out: &mut Outcome| {
        for (k, p) in b.pkts.iter().enumerate() {
            out.packets[start + k] = match p.verdict {
                Verdict::Forward => Ok(p.data().to_vec()),
                Verdict::Drop(r) => Err(r.reason),
            };
        }
    };
    let mut i = 0;
    while i < trace.len() {
        let mut b = Batch::with_capacity(batch);
        let start = i;
        while i < trace.len() && i - start < batch {
            let (ts, f) = trace.get(i);
            b.push_frame(&mut pool, f, ts, 0);
            i += 1;
        }
        match pipe.as_mut() {
            Some(p) => {
                p.push(&mut ch, store.as_mut(), b, start);
                while let Some((b, s)) = p.pop() {
                    record(&b, s, &mut out);
                }
            }
            None => {
                ch.process(&mut b, store.as_mut());
                record(&b, start, &mut out);
            }
        }
        collect(ch.take_events(), &mut out);
    }
    if let Some(p) = pipe.as_mut() {
        p.flush(&mut ch, store.as_mut());
        assert_eq!(p.lost_batches(), 0);
        while let Some((b, s)) = p.pop() {
            record(&b, s, &mut out);
        }
        ch.set_ownership(None, store.as_mut()).unwrap();
    }
    ch.flush(store.as_mut());
    collect(ch.take_events(), &mut out);
    let st = ch.stats();
    assert_eq!(st.store_errors, 0, "{:?}", st.last_error);
    out.stats = (
        st.packets,
        st.forwarded,
        st.dropped,
        st.stages
            .iter()
            .map(|s| (s.packets_in, s.packets_out))
            .collect(),
    );
    out.flows.sort();
    out.alerts.sort();
    out
}

fn spec(seed: u64) -> IdleSpec {
    IdleSpec {
        seed,
        flows: 70,
        // Every timeout of CHAIN, and the refresh and linger granularities.
        timeouts_ns: vec![
            7 * S / 10,
            3 * S / 2,
            2 * S,
            3 * S,
            4 * S,
            5 * S,
            6 * S,
            7 * S,
            8 * S,
            9 * S,
        ],
        pause_share: 0.2,
        needles: vec![b"/etc/passwd".to_vec(), b"zzz".to_vec()],
        ..IdleSpec::default()
    }
}

/// The reference run of seed `seed`: batches of one packet, no pipeline.
fn reference(seed: u64) -> (Trace, Outcome) {
    let trace = idle_trace(&spec(seed));
    let reference = run(CHAIN, &trace, 1, None);
    // The trace exercises what it is meant to: idle exports, live and
    // dropped packets, alerts.
    assert!(reference.flows.iter().any(|f| f.4 == "timeout"));
    assert!(reference.flows.iter().any(|f| f.4 == "tcp_close"));
    assert!(reference.packets.iter().any(|p| p.is_ok()));
    assert!(reference.packets.contains(&Err("no_state")));
    assert!(!reference.alerts.is_empty());
    (trace, reference)
}

#[test]
fn results_do_not_depend_on_batch_size() {
    for seed in 1..=6 {
        let (trace, reference) = reference(seed);
        for batch in [2, 7, 32, 256] {
            let o = run(CHAIN, &trace, batch, None);
            assert_same(&reference, &o, &format!("seed {seed}, batch {batch}"));
        }
    }
}

#[test]
fn pipelining_gives_the_same_results() {
    for seed in 1..=6 {
        let (trace, reference) = reference(seed);
        for window in [1, 16, 64, 256] {
            for batch in [1, 8] {
                let o = run(CHAIN, &trace, batch, Some(window));
                let what = format!("seed {seed}, batch {batch}, pipeline {window}");
                assert_same(&reference, &o, &what);
            }
        }
    }
}

fn assert_same(a: &Outcome, b: &Outcome, what: &str) {
    for (i, (x, y)) in a.packets.iter().zip(&b.packets).enumerate() {
        assert_eq!(
            x.as_ref().map(|_| ()),
            y.as_ref().map(|_| ()),
            "{what}: packet {i}"
        );
    }
    assert!(a.packets == b.packets, "{what}: forwarded bytes differ");
    assert_eq!(a.flows, b.flows, "{what}: flow records");
    assert_eq!(a.alerts, b.alerts, "{what}: alerts");
    assert_eq!(a.stats, b.stats, "{what}: chain counters");
}

/// A Maglev load balancer for every server of the idle traces (TCP port 80
/// and UDP port 53 on 192.0.2.1-4), with timeouts the pauses straddle, and a
/// monitor behind it.
fn lb_chain() -> String {
    let mut t = String::from("name: lb-batching\nfunctions:\n  - type: lb\n    refresh_ms: 700\n");
    t += "    timeouts: { tcp: 8, tcp_closing: 3, udp: 5 }\n    services:\n";
    for v in 1..=4 {
        for (port, proto, b) in [(80, "tcp", 10 * v), (53, "udp", 10 * v + 5)] {
            t += &format!(
                "      - vip: 192.0.2.{v}\n        port: {port}\n        proto: {proto}\n        \
                 backends:\n          - {{ addr: \"198.51.100.{b}:8080\", weight: 1 }}\n          \
                 - {{ addr: \"198.51.100.{}:8080\", weight: 2 }}\n          \
                 - {{ addr: \"198.51.100.{}:8080\", weight: 1 }}\n",
                b + 1,
                b + 2
            );
        }
    }
    t + "  - type: monitor\n    idle_timeout_secs: 6\n    close_linger_ms: 1500\n\
         settings:\n  batch_size: 32\n  timer_interval_ms: 300\n"
}

/// An idle trace as the load balancer's clients and backends send it: the
/// servers' packets come from the backend Maglev picks for their flow
/// (learnt from the flow's first client packet alone), to the client.
fn lb_trace(seed: u64, chain: &str) -> Trace {
    let raw = idle_trace(&spec(seed));
    let mut backend: std::collections::HashMap<FlowKey, (IpAddr, u16)> = Default::default();
    let mut pool = PacketPool::new(4);
    let mut out = Trace::new();
    for (ts, f) in raw.iter() {
        let mut frame = f.to_vec();
        let mut m = parse_frame(&frame).unwrap();
        let from_client = matches!(m.flow.src, IpAddr::V4([10, ..]));
        if from_client && !backend.contains_key(&m.flow) {
            let mut ch = self::chain(chain);
            let mut b = Batch::with_capacity(1);
            b.push_frame(&mut pool, &frame, ts, 0);
            ch.process(&mut b, &mut LocalStore::new());
            if b.pkts[0].verdict == Verdict::Forward {
                let t = parse_frame(b.pkts[0].data()).unwrap().flow;
                backend.insert(m.flow, (t.dst, t.dst_port));
            }
            b.recycle(&mut pool);
        }
        if !from_client {
            if let Some(&(a, p)) = backend.get(&m.flow.reverse()) {
                set_endpoint(&mut frame, &mut m, Endpoint::Src, a, p).unwrap();
            }
        }
        out.push(ts, &frame);
    }
    out
}

#[test]
fn load_balancing_does_not_depend_on_batch_size_or_pipeline_window() {
    let text = lb_chain();
    for seed in 1..=4 {
        let trace = lb_trace(seed, &text);
        let reference = run(&text, &trace, 1, None);
        assert!(reference.flows.iter().any(|f| f.4 == "timeout"));
        assert!(reference.packets.iter().filter(|p| p.is_ok()).count() > trace.len() / 2);
        assert!(reference.packets.contains(&Err("no_state")));
        for batch in [2, 7, 32, 256] {
            let o = run(&text, &trace, batch, None);
            assert_same(&reference, &o, &format!("lb: seed {seed}, batch {batch}"));
        }
        for window in [1, 16, 64, 256] {
            let o = run(&text, &trace, 8, Some(window));
            assert_same(
                &reference,
                &o,
                &format!("lb: seed {seed}, pipeline {window}"),
            );
        }
    }
}

/// A NAT for the idle traces' clients (10/8) with timeouts the pauses
/// straddle, and a monitor behind it. The pool is larger than the traces'
/// mappings: an item freed is never reused, so which one a new mapping gets
/// does not depend on when timers freed others.
const NAT_CHAIN: &str = r#"
name: nat-batching
functions:
  - type: nat
    inside: ["10.0.0.0/8"]
    pool: ["203.0.113.0/24"]
    ports: "1024-1099"
    refresh_ms: 700
    timeouts: { tcp_established: 8, tcp_transitory: 3, udp: 5 }
  - type: monitor
    idle_timeout_secs: 6
    close_linger_ms: 1500
settings:
  batch_size: 32
  timer_interval_ms: 300
"#;

/// An idle trace as the NAT's clients and the servers send it: each server
/// packet goes to the public endpoint its flow's mapping had when the client
/// last sent (learnt by running the trace through a twin one packet at a
/// time, as the reference does).
fn nat_trace(seed: u64) -> Trace {
    let raw = idle_trace(&spec(seed));
    let mut public: std::collections::HashMap<FlowKey, (IpAddr, u16)> = Default::default();
    let mut twin = chain(NAT_CHAIN);
    let mut store = LocalStore::new();
    let mut pool = PacketPool::new(4);
    let mut out = Trace::new();
    for (ts, f) in raw.iter() {
        let mut frame = f.to_vec();
        let mut m = parse_frame(&frame).unwrap();
        let from_client = matches!(m.flow.src, IpAddr::V4([10, ..]));
        if !from_client {
            if let Some(&(a, p)) = public.get(&m.flow.reverse()) {
                set_endpoint(&mut frame, &mut m, Endpoint::Dst, a, p).unwrap();
            }
        }
        let mut b = Batch::with_capacity(1);
        b.push_frame(&mut pool, &frame, ts, 0);
        twin.process(&mut b, &mut store);
        if from_client && b.pkts[0].verdict == Verdict::Forward {
            let t = parse_frame(b.pkts[0].data()).unwrap().flow;
            public.insert(m.flow, (t.src, t.src_port));
        }
        b.recycle(&mut pool);
        twin.take_events();
        out.push(ts, &frame);
    }
    out
}

#[test]
fn translation_does_not_depend_on_batch_size_or_pipeline_window() {
    for seed in 1..=4 {
        let trace = nat_trace(seed);
        let reference = run(NAT_CHAIN, &trace, 1, None);
        assert!(reference.flows.iter().any(|f| f.4 == "timeout"));
        assert!(reference.packets.iter().filter(|p| p.is_ok()).count() > trace.len() / 2);
        assert!(reference.packets.contains(&Err("no_mapping")));
        for batch in [2, 7, 32, 256] {
            let o = run(NAT_CHAIN, &trace, batch, None);
            assert_same(&reference, &o, &format!("nat: seed {seed}, batch {batch}"));
        }
        for window in [1, 16, 64, 256] {
            let o = run(NAT_CHAIN, &trace, 8, Some(window));
            assert_same(
                &reference,
                &o,
                &format!("nat: seed {seed}, pipeline {window}"),
            );
        }
    }
}
