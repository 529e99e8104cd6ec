//! The flow cache in front of the shared store (docs/STATE.md, "Consistency
//! model"): instances holding ownership leases on hash ranges of the flows they are
//! steered, with records cached, refreshes and counters deferred, must produce
//! exactly what one instance with local state produces: verdicts, rewritten bytes,
//! IPS alerts and flow records. Also across an ownership change mid-trace, when a
//! non-owner continues an owner's flows, and when an owner dies with deferred writes
//! and writes it never waited for (only deferred counts may be lost, no verdict
//! changes). And the cache must save store round trips on long flows. NAT and LB
//! owners: `cached_rewrite.rs`.

use sluice_nf::Verdict;
use sluice_packet::{Batch, PacketPool};
use sluice_state::{hash_range_split, LocalStore, SharedLocalStore, StateStore, StoreCounters};
use sluice_state_redis::server::{flushall, RedisCluster, RedisServer};
use sluice_state_redis::{ClusterStore, RedisStore};
use sluice_trafficgen::{generate, Endpoints, Proto, TcpConversation, TrafficSpec};
use sluice_wire::IpAddr;

mod common;
mod steering;
use common::*;
use steering::{lease, owner_of};

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
    run(insts, t, &mut |pos, _, insts, _| {
        let Some(i) = pos.start() else {
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
    let got = run(insts, &t, &mut |pos, f, insts, alive| {
        if let Some(i) = pos.start() {
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
    let got = run(insts, &t, &mut |pos, f, insts, alive| {
        if let Some(i) = pos.start() {
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
