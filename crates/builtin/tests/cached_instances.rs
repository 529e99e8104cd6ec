//! The flow cache in front of the shared store (docs/STATE.md, "Consistency
//! model"): instances holding ownership leases on hash ranges of the flows they are
//! steered, with records cached, refreshes and counters deferred, must produce
//! exactly what one instance with local state produces: verdicts, rewritten bytes,
//! IPS alerts and flow records. Also across an ownership change mid-trace, when a
//! non-owner continues an owner's flows, and when an owner dies with deferred writes
//! and writes it never waited for (only deferred counts may be lost, no verdict
//! changes). And the cache must save store round trips on long flows. NAT and LB
//! owners: `cached_rewrite.rs`.

use std::collections::BTreeMap;
use std::path::Path;

use sluice_chain::{Chain, ChainSpec, Pipeline, Sharing};
use sluice_nf::{Event, Verdict};
use sluice_packet::{Batch, PacketPool};
use sluice_state::{
    hash_range_split, LocalStore, Ownership, SharedLocalStore, StateStore, StoreCounters,
};
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
    /// Pipelined mode (docs/STATE.md, "Pipelining"): batches go through a
    /// pipeline of this instance, tagged with their first packet's index.
    pipe: Option<Pipeline<usize>>,
    /// Batches the pipeline released, not yet recorded.
    done: Vec<(Batch, usize)>,
}

impl Instance {
    fn pipelined(mut self, window: usize) -> Instance {
        self.pipe = Some(Pipeline::new(&mut self.chain, self.store.as_mut(), window));
        self
    }

    /// Processes (or, pipelined, accepts) a batch starting at packet `start`.
    fn take(&mut self, mut batch: Batch, start: usize) {
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
    fn settle(&mut self) {
        if let Some(p) = self.pipe.as_mut() {
            p.flush(&mut self.chain, self.store.as_mut());
            assert_eq!(p.lost_batches(), 0, "no held write failed");
        }
        self.collect_released();
    }
}

fn instance_of(text: &str, store: Box<dyn StateStore>) -> Instance {
    let spec = ChainSpec::from_str(text, Path::new("cached.yaml")).unwrap();
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

fn instance(store: Box<dyn StateStore>) -> Instance {
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

/// The direction-invariant hash the switch's hash-range groups use.
fn hash_of(frame: &[u8]) -> u32 {
    parse_frame(frame)
        .map(|m| m.flow.symmetric_hash())
        .unwrap_or(0)
}

/// The instance whose range (of `split`) holds the frame's hash, as the switch steers.
fn owner_of(split: &[Option<(u32, u32)>], frame: &[u8]) -> usize {
    let h = hash_of(frame);
    split
        .iter()
        .position(|r| r.is_some_and(|(lo, hi)| lo <= h && h <= hi))
        .unwrap_or(0)
}

/// A lease on `range` (or everything), valid far into the future.
fn lease(epoch: u64, ranges: Vec<(u32, u32)>) -> Ownership {
    Ownership {
        epoch,
        ranges,
        valid_until_ns: u64::MAX,
    }
}

/// Decides, before packet `i`, which instance gets it; may change leases (it gets
/// every instance) and may kill one (`Some(k)`: dropped without flush).
type Plan<'a> = dyn FnMut(usize, &[u8], &mut [Instance], &mut [bool]) -> usize + 'a;

/// Runs the trace in batches of up to 16 consecutive packets for the same instance.
fn run(mut insts: Vec<Instance>, trace: &[(u64, Vec<u8>)], plan: &mut Plan<'_>) -> Outcome {
    let mut alive = vec![true; insts.len()];
    let mut pool = PacketPool::new(8192);
    let mut packets = vec![(false, Vec::new()); trace.len()];
    let mut alerts = Vec::new();
    let mut flows = BTreeMap::new();
    let mut i = 0;
    while i < trace.len() {
        let who = plan(i, &trace[i].1, &mut insts, &mut alive);
        assert!(alive[who]);
        let mut batch = Batch::with_capacity(16);
        let start = i;
        batch.push_frame(&mut pool, &trace[i].1, trace[i].0, 0);
        i += 1;
        while i < trace.len() && i - start < 16 {
            // Peek without side effects: leases change only at batch starts.
            let mut probe_alive = alive.clone();
            let next = plan(usize::MAX - i, &trace[i].1, &mut [], &mut probe_alive);
            if next != who {
                break;
            }
            batch.push_frame(&mut pool, &trace[i].1, trace[i].0, 0);
            i += 1;
        }
        let inst = &mut insts[who];
        inst.take(batch, start);
        for (mut batch, start) in inst.done.drain(..) {
            for (k, p) in batch.pkts.iter().enumerate() {
                packets[start + k] = (p.verdict == Verdict::Forward, p.data().to_vec());
            }
            batch.recycle(&mut pool);
        }
        let ev = inst.chain.take_events();
        collect(ev, &mut alerts, &mut flows);
    }
    for (k, inst) in insts.iter_mut().enumerate() {
        if alive[k] {
            inst.settle();
            for (mut batch, start) in inst.done.drain(..) {
                for (k, p) in batch.pkts.iter().enumerate() {
                    packets[start + k] = (p.verdict == Verdict::Forward, p.data().to_vec());
                }
                batch.recycle(&mut pool);
            }
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
    static CACHE_HITS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Operations held and prefetched results used by pipelined runs so far.
    static HELD_AND_FILLS: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// Packet indices above this are peeks (see `run`): plans must not act on them.
fn peek(i: usize) -> Option<usize> {
    (i < usize::MAX / 2).then_some(i)
}

fn reference(trace: &[(u64, Vec<u8>)]) -> Outcome {
    let one = vec![instance(Box::new(LocalStore::new()))];
    run(one, trace, &mut |_, _, _, _| 0)
}

/// `n` instances, each leased one range of an even split and steered its flows.
fn split_run(
    make: &dyn Fn() -> Box<dyn StateStore>,
    n: usize,
    t: &[(u64, Vec<u8>)],
    window: Option<usize>,
) -> Outcome {
    let split = hash_range_split(&vec![1; n]);
    let mut insts: Vec<Instance> = (0..n).map(|_| instance(make())).collect();
    for (k, inst) in insts.iter_mut().enumerate() {
        let own = lease(1, split[k].into_iter().collect());
        inst.chain
            .set_ownership(Some(own), inst.store.as_mut())
            .unwrap();
    }
    let insts = insts
        .into_iter()
        .map(|i| match window {
            Some(w) => i.pipelined(w),
            None => i,
        })
        .collect();
    run(insts, t, &mut |_, f, _, _| owner_of(&split, f))
}

/// Instance 0 owns everything until packet `at`; then it is revoked (flushing its
/// deferred writes) and instance 1 is granted everything and gets every packet.
fn handover_run(
    make: &dyn Fn() -> Box<dyn StateStore>,
    t: &[(u64, Vec<u8>)],
    grant_b: bool,
    window: Option<usize>,
) -> Outcome {
    let at = t.len() / 2;
    let mut insts: Vec<Instance> = (0..2)
        .map(|_| match window {
            Some(w) => instance(make()).pipelined(w),
            None => instance(make()),
        })
        .collect();
    let a = &mut insts[0];
    a.chain
        .set_ownership(Some(lease(1, vec![(0, u32::MAX)])), a.store.as_mut())
        .unwrap();
    let mut moved = false;
    run(insts, t, &mut |i, _, insts, _| {
        let Some(i) = peek(i) else {
            return usize::from(moved);
        };
        if i >= at && !moved {
            moved = true;
            let a = &mut insts[0];
            a.settle();
            a.chain.set_ownership(None, a.store.as_mut()).unwrap();
            if grant_b {
                let b = &mut insts[1];
                b.chain
                    .set_ownership(Some(lease(2, vec![(0, u32::MAX)])), b.store.as_mut())
                    .unwrap();
            }
        }
        usize::from(moved)
    })
}

fn check_cached(make: &dyn Fn() -> Box<dyn StateStore>, reset: &dyn Fn(), window: Option<usize>) {
    let t = trace();
    let want = reference(&t);
    assert!(want.alerts.len() >= 4 && want.flows.len() >= 24);
    for n in [1usize, 2, 3, 4] {
        reset();
        let before = CACHE_HITS.with(|h| h.get());
        let got = split_run(make, n, &t, window);
        assert_eq!(
            got, want,
            "{n} instances, each owning a hash range (pipeline window {window:?})"
        );
        let hits = CACHE_HITS.with(|h| h.get()) - before;
        assert!(
            hits > 100,
            "{n} instances: the cache answered reads ({hits})"
        );
    }
    reset();
    assert_eq!(
        handover_run(make, &t, true, window),
        want,
        "ownership moved mid-trace"
    );
    reset();
    assert_eq!(
        handover_run(make, &t, false, window),
        want,
        "a non-owner continues the owner's flows from the store"
    );
}

#[test]
fn cached_instances_behave_as_one_local() {
    // A fresh shared store per run (the reset), handles onto it per instance.
    let shared = std::cell::RefCell::new(SharedLocalStore::new());
    check_cached(
        &|| Box::new(shared.borrow().handle()),
        &|| {
            *shared.borrow_mut() = SharedLocalStore::new();
        },
        None,
    );
}

#[test]
fn cached_instances_behave_as_one_redis() {
    let srv = RedisServer::start(&[]).expect("start redis-server");
    let url = srv.url();
    let port = srv.port();
    check_cached(
        &|| Box::new(RedisStore::open(&url).unwrap()),
        &|| flushall(port).unwrap(),
        None,
    );
}

/// Cached and pipelined owners on a 3-primary Redis Cluster (keys spread over
/// nodes; the cluster store answers a started read at once and settles writes
/// sent without waiting only when no node has any outstanding).
#[test]
fn cached_and_pipelined_instances_behave_as_one_cluster() {
    let cluster = RedisCluster::start(3).expect("start a 3-node cluster");
    let url = cluster.url();
    let ports: Vec<u16> = cluster.nodes.iter().map(|n| n.port()).collect();
    for window in [None, Some(2)] {
        check_cached(
            &|| Box::new(ClusterStore::open(&url).unwrap()),
            &|| {
                for &p in &ports {
                    flushall(p).unwrap();
                }
            },
            window,
        );
    }
}

/// The same in pipelined mode: records of the next window read ahead, new
/// records and timers held until the store answered, on Redis (whose replies
/// really lag) with windows of one and three batches.
#[test]
fn pipelined_instances_behave_as_one_redis() {
    let srv = RedisServer::start(&[]).expect("start redis-server");
    let url = srv.url();
    let port = srv.port();
    for window in [1, 3] {
        check_cached(
            &|| Box::new(RedisStore::open(&url).unwrap()),
            &|| flushall(port).unwrap(),
            Some(window),
        );
    }
    let (held, fills) = HELD_AND_FILLS.with(|h| h.get());
    assert!(
        held > 100 && fills > 100,
        "pipelining held writes ({held}) and read ahead ({fills})"
    );
}

#[test]
fn owner_crash_loses_only_deferred_writes() {
    let t = trace();
    let want = reference(&t);
    let srv = RedisServer::start(&[]).expect("start redis-server");
    let url = srv.url();
    // Two owners of half the hashes each; owner 1 dies a third of the way in without
    // flushing, and owner 0 is granted its range (the lease of a dead instance ends by
    // itself; here the control plane regrants at once).
    let split = hash_range_split(&[1, 1]);
    // Scan and stream progress sent before each batch leaves (`sync_progress`;
    // the default defers them: see
    // `an_owner_crash_that_loses_stream_progress_resynchronises_instead_of_stalling`).
    let chain = format!(
        "{}reassembly:\n  sync_progress: true\n",
        CHAIN.replace(
            "  - type: ips\n",
            "  - type: ips\n    sync_progress: true\n"
        )
    );
    let mut insts: Vec<Instance> = (0..2)
        .map(|_| instance_of(&chain, Box::new(RedisStore::open(&url).unwrap())))
        .collect();
    for (k, inst) in insts.iter_mut().enumerate() {
        inst.chain
            .set_ownership(
                Some(lease(1, split[k].into_iter().collect())),
                inst.store.as_mut(),
            )
            .unwrap();
    }
    let at = t.len() / 3;
    let mut dead = false;
    let mut deferred_before_death = 0;
    let mut unacked_before_death = 0;
    let got = run(insts, &t, &mut |i, f, insts, alive| {
        if let Some(i) = peek(i) {
            if i >= at && !dead {
                dead = true;
                alive[1] = false;
                let st = insts[1].chain.cache_stats().unwrap();
                deferred_before_death = st.deferred;
                unacked_before_death = st.unacked;
                let a = &mut insts[0];
                a.chain
                    .set_ownership(Some(lease(2, vec![(0, u32::MAX)])), a.store.as_mut())
                    .unwrap();
            }
        }
        if alive[1] {
            owner_of(&split, f)
        } else {
            0
        }
    });
    assert!(
        dead && deferred_before_death > 0,
        "the dead owner had deferred writes"
    );
    // The IPS's scan state and the reassembler's stream progress were sent
    // without waiting (each batch's before it left): the survivor resumes every
    // stream where the dead owner left it, so verdicts and alerts are unchanged.
    assert!(
        unacked_before_death > 0,
        "the dead owner sent writes it did not wait for"
    );
    assert_eq!(got.packets, want.packets, "no verdict or rewrite changes");
    assert_eq!(got.alerts, want.alerts);
    assert_eq!(
        got.flows.keys().collect::<Vec<_>>(),
        want.flows.keys().collect::<Vec<_>>(),
        "every flow is still exported, once"
    );
    for (k, w) in &want.flows {
        let g = got.flows[k];
        assert!(
            g.0 <= w.0 && g.1 <= w.1 && g.2 <= w.2 && g.3 <= w.3,
            "{k}: counts {g:?} may only lose deferred increments of {w:?}"
        );
    }
}

const LONG: &str = r#"
name: cached-long
functions:
  - type: firewall
    rules: |
      allow tcp from 10.0.0.0/8 to 192.0.2.0/24
      default deny
  - type: monitor
settings:
  batch_size: 32
"#;

/// Runs a long-flow trace on one instance in batches of 32, with or without a lease;
/// returns the verdicts and the store's counters.
fn long_run(
    store: Box<dyn StateStore>,
    t: &[(u64, Vec<u8>)],
    cached: bool,
) -> (Vec<bool>, StoreCounters) {
    let (v, c, _) = long_run_stats(store, t, cached);
    (v, c)
}

/// [`long_run`], also returning the cache's counters before the final flush.
fn long_run_stats(
    store: Box<dyn StateStore>,
    t: &[(u64, Vec<u8>)],
    cached: bool,
) -> (Vec<bool>, StoreCounters, Option<sluice_state::CacheStats>) {
    let mut inst = instance_of(LONG, store);
    if cached {
        inst.chain
            .set_ownership(Some(lease(1, vec![(0, u32::MAX)])), inst.store.as_mut())
            .unwrap();
    }
    let mut pool = PacketPool::new(64);
    let mut verdicts = Vec::new();
    for chunk in t.chunks(32) {
        let mut batch = Batch::with_capacity(32);
        for (ts, f) in chunk {
            batch.push_frame(&mut pool, f, *ts, 0);
        }
        inst.chain.process(&mut batch, inst.store.as_mut());
        verdicts.extend(batch.pkts.iter().map(|p| p.verdict == Verdict::Forward));
        batch.recycle(&mut pool);
    }
    let stats = inst.chain.cache_stats();
    inst.chain.flush(inst.store.as_mut());
    assert_eq!(inst.chain.stats().store_errors, 0);
    (verdicts, inst.store.counters(), stats)
}

#[test]
fn cache_saves_round_trips_on_long_flows() {
    let t: Vec<(u64, Vec<u8>)> = generate(&TrafficSpec {
        flows: 8,
        packets_per_flow: 2000,
        frame_size: 256,
        proto: Proto::Tcp,
        seed: 3,
        ..Default::default()
    })
    .iter()
    .map(|(ts, f)| (ts, f.to_vec()))
    .collect();
    let (v_off, off) = long_run(Box::new(LocalStore::new()), &t, false);
    let (v_on, on) = long_run(Box::new(LocalStore::new()), &t, true);
    assert_eq!(v_on, v_off, "same verdicts");
    assert!(v_on.iter().filter(|&&f| f).count() > t.len() / 2);
    let pkts = t.len() as f64;
    eprintln!(
        "round trips/packet: {:.4} uncached, {:.4} cached; ops/packet {:.3} vs {:.3}",
        off.round_trips as f64 / pkts,
        on.round_trips as f64 / pkts,
        off.total_ops() as f64 / pkts,
        on.total_ops() as f64 / pkts
    );
    assert!(
        on.round_trips * 4 < off.round_trips,
        "cached {on:?} vs uncached {off:?}"
    );
    assert!(on.total_ops() * 2 < off.total_ops());
}

#[test]
fn due_deferred_writes_never_wait_on_redis() {
    let t: Vec<(u64, Vec<u8>)> = generate(&TrafficSpec {
        flows: 8,
        packets_per_flow: 2000,
        frame_size: 256,
        proto: Proto::Tcp,
        seed: 5,
        ..Default::default()
    })
    .iter()
    .map(|(ts, f)| (ts, f.to_vec()))
    .collect();
    assert!(
        t.last().unwrap().0 - t[0].0 > 10_000_000,
        "the trace spans several deferral deadlines"
    );
    let srv = RedisServer::start(&[]).expect("start redis-server");
    let (v_local, local, _) = long_run_stats(Box::new(LocalStore::new()), &t, false);
    let store = Box::new(RedisStore::open(&srv.url()).unwrap());
    let (v_redis, redis, stats) = long_run_stats(store, &t, true);
    assert_eq!(v_redis, v_local, "same verdicts as local state");
    let stats = stats.expect("the instance holds a lease");
    assert!(stats.deferred_flushed > 0, "{stats:?}");
    assert!(
        stats.background_flushes > 0,
        "due deferred writes went out without a round trip: {stats:?}"
    );
    assert_eq!(stats.deferred_lost, 0);
    // Round trips are only the reads and writes that had to wait: far fewer
    // than the uncached run's, and no more than one per background flush
    // would have added.
    assert!(
        redis.round_trips * 4 < local.round_trips,
        "{redis:?} vs {local:?}"
    );
    assert!(redis.writes >= stats.deferred_flushed);
}

/// A store whose sends without waiting vanish once `lose` is set: a dying
/// instance whose last writes never reached the store (the host failed with
/// them in flight).
struct LosesUnacked {
    inner: Box<dyn StateStore>,
    lose: std::rc::Rc<std::cell::Cell<bool>>,
}

impl StateStore for LosesUnacked {
    fn execute(&mut self, ops: &mut sluice_state::Ops) -> Result<(), sluice_state::StoreError> {
        self.inner.execute(ops)
    }
    fn take_expired(
        &mut self,
        ns: sluice_state::Namespace,
        now_ns: u64,
        max: usize,
        out: &mut Vec<sluice_state::Key>,
    ) -> Result<(), sluice_state::StoreError> {
        self.inner.take_expired(ns, now_ns, max, out)
    }
    fn counters(&self) -> StoreCounters {
        self.inner.counters()
    }
    fn execute_unacked(
        &mut self,
        ops: &mut sluice_state::Ops,
    ) -> Result<(), sluice_state::StoreError> {
        if self.lose.get() {
            return Ok(());
        }
        self.inner.execute_unacked(ops)
    }
    fn describe(&self) -> String {
        "loses-unacked".into()
    }
}

/// Long downloads: each flow's server sends 40 segments, its client
/// acknowledging each (an empty segment), flows interleaved round-robin.
fn downloads() -> Vec<(u64, Vec<u8>)> {
    let mut buf = vec![0u8; 2048];
    let mut flows: Vec<Vec<Vec<u8>>> = Vec::new();
    for f in 0..8u32 {
        let ep = Endpoints {
            client: IpAddr::V4([10, 8, 0, f as u8 + 1]),
            server: IpAddr::V4([192, 0, 2, 20 + (f % 3) as u8]),
            client_port: 41_000 + f as u16,
            server_port: 80,
        };
        let mut conv = TcpConversation::new(ep, 31 * f + 7, 57 * f + 11);
        let mut pk: Vec<Vec<u8>> = Vec::new();
        conv.handshake(&mut buf, &mut |b| pk.push(b.to_vec()));
        conv.data(&mut buf, true, b"GET /big HTTP/1.1\r\n\r\n", &mut |b| {
            pk.push(b.to_vec())
        });
        for k in 0..40u8 {
            conv.data(&mut buf, false, &[b'a' + k % 26; 500], &mut |b| {
                pk.push(b.to_vec())
            });
            conv.data(&mut buf, true, b"", &mut |b| pk.push(b.to_vec()));
        }
        conv.teardown(&mut buf, &mut |b| pk.push(b.to_vec()));
        flows.push(pk);
    }
    let mut out = Vec::new();
    let mut ts = 1_700_000_000_000_000_000u64;
    for k in 0..flows.iter().map(Vec::len).max().unwrap_or(0) {
        for f in &flows {
            if let Some(p) = f.get(k) {
                ts += 5_000;
                out.push((ts, p.clone()));
            }
        }
    }
    out
}

#[test]
fn an_owner_crash_that_loses_stream_progress_resynchronises_instead_of_stalling() {
    // Owner 1's last batches' stream and scan progress never reach the store
    // before it dies (deferred, the default, and its sends from then on lost:
    // a host that failed). The survivor's records are behind those streams: the
    // next segments look out of order, and nobody will resend the missing bytes.
    // The receivers' acknowledgements show they got them, so the reassembler
    // skips the gap instead of filling its buffer and dropping (a stall).
    let t = downloads();
    let want = reference(&t);
    let shared = SharedLocalStore::new();
    let lose = std::rc::Rc::new(std::cell::Cell::new(false));
    let resyncs = std::rc::Rc::new(std::cell::Cell::new(0u64));
    let split = hash_range_split(&[1, 1]);
    let mut insts = vec![
        instance(Box::new(shared.handle())),
        instance(Box::new(LosesUnacked {
            inner: Box::new(shared.handle()),
            lose: lose.clone(),
        })),
    ];
    for (k, inst) in insts.iter_mut().enumerate() {
        inst.chain
            .set_ownership(
                Some(lease(1, split[k].into_iter().collect())),
                inst.store.as_mut(),
            )
            .unwrap();
    }
    let (from, at) = (t.len() / 4, t.len() / 3);
    let mut dead = false;
    let got = run(insts, &t, &mut |i, f, insts, alive| {
        if let Some(i) = peek(i) {
            if i >= from {
                lose.set(true);
            }
            if i >= at && !dead {
                dead = true;
                alive[1] = false;
                let a = &mut insts[0];
                a.chain
                    .set_ownership(Some(lease(2, vec![(0, u32::MAX)])), a.store.as_mut())
                    .unwrap();
            }
            if dead {
                let st = insts[0].chain.stats();
                let n = st
                    .reassembly_counters
                    .iter()
                    .find(|c| c.0 == "reassembly_resyncs")
                    .map_or(0, |c| c.1);
                resyncs.set(n);
            }
        }
        if alive[1] {
            owner_of(&split, f)
        } else {
            0
        }
    });
    assert!(dead);
    // Everything the single instance forwarded still goes through.
    let stalled: Vec<usize> = (0..t.len())
        .filter(|&k| want.packets[k].0 && !got.packets[k].0)
        .collect();
    assert!(stalled.is_empty(), "packets dropped: {stalled:?}");
    assert!(resyncs.get() > 0, "the survivor resynchronised");
    assert_eq!(got.packets.len(), want.packets.len());
}
