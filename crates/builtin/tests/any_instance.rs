//! "Any packet to any instance" (StatelessNF §4.1): the same traces through one
//! instance with local state, and through 2, 3 and 4 instances sharing a Redis store
//! (standalone and a 3-primary cluster) with packets sprayed at random, with each
//! flow's two directions on different instances, and with an instance killed
//! mid-trace. Verdicts, forwarded bytes, alerts and flow records must be identical.

use sluice_state::StateStore;
use sluice_state_redis::server::{flushall, RedisCluster, RedisServer};
use sluice_state_redis::{ClusterStore, RedisStore};
use sluice_trafficgen::Rng;
use sluice_wire::parse::parse_frame;

mod common;
mod steering;
use common::*;
use steering::At;

/// Chooses the instance of packet `i` given its frame and which instances live.
type Picker = dyn Fn(usize, &[u8], &[bool]) -> usize;

/// Runs the trace; `pick(i, frame, alive)` chooses the instance of packet `i`.
/// Consecutive packets for the same instance form one batch (up to 16), and batches
/// run in trace order, as packets would arrive. `kill` stops an instance (no flush,
/// its memory lost) after that many packets.
fn run_picked(
    insts: Vec<Instance>,
    trace: &[(u64, Vec<u8>)],
    pick: &Picker,
    kill: Option<(usize, usize)>,
) -> Outcome {
    let due = |i: usize, alive: &[bool]| kill.filter(|&(k, after)| i >= after && alive[k]);
    run(insts, trace, &mut |pos, f, insts, alive| match pos {
        At::Start(i) => {
            if let Some((k, _)) = due(i, alive) {
                // Its store errors are checked here: a dead instance is neither
                // ticked nor flushed, so they are final, and `run` checks only
                // the survivors'.
                let st = insts[k].chain.stats();
                assert_eq!(st.store_errors, 0, "{:?}", st.last_error);
                alive[k] = false;
            }
            pick(i, f, alive)
        }
        At::Fill(i) => {
            let w = pick(i, f, alive);
            match due(i, alive) {
                // The dying instance's last batch ends here: no instance is
                // numbered usize::MAX, so the run starts a new batch.
                Some((k, _)) if w == k => usize::MAX,
                _ => w,
            }
        }
    })
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
    assert_eq!(
        want.alerts.iter().filter(|a| a.0 == 4).count(),
        4,
        "each HTTP response body's signature across two segments: {:?}",
        want.alerts
    );
    assert!(want.flows.len() >= 24);
    for n in [2usize, 3, 4] {
        flush_store();
        let got = run_picked(
            (0..n).map(|_| instance(make())).collect(),
            &t,
            &spray(n as u64),
            None,
        );
        assert_eq!(got, want, "{n} instances, sprayed");
        flush_store();
        let got = run_picked(
            (0..n).map(|_| instance(make())).collect(),
            &t,
            &asymmetric,
            None,
        );
        assert_eq!(got, want, "{n} instances, asymmetric");
    }
    // An instance dies a third of the way in; the others take its packets.
    flush_store();
    let got = run_picked(
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
