//! The cluster backend against a real 3-primary Redis Cluster started by the test.

use std::collections::HashSet;

use sluice_state::{Key, LocalStore, Namespace, Ops, StateStore};
use sluice_state_redis::server::RedisCluster;
use sluice_state_redis::ClusterStore;

mod common;
use common::scenario;

#[test]
fn cluster_behaves_like_the_local_store_and_follows_redirects() {
    let cluster = RedisCluster::start(3).expect("start a 3-node cluster");
    let mut c = ClusterStore::open(&cluster.url()).unwrap();
    let mut local = LocalStore::new();
    assert_eq!(scenario(&mut local), scenario(&mut c));

    // Many keys spread over every node, written and read back in one batch each.
    let mut ops = Ops::new();
    for i in 0..300u32 {
        ops.put(
            Key::new(Namespace(8), 1, &i.to_be_bytes()),
            &i.to_le_bytes(),
        );
    }
    c.execute(&mut ops).unwrap();
    let rt = c.counters().round_trips;
    ops.clear();
    let ids: Vec<_> = (0..300u32)
        .map(|i| ops.get(Key::new(Namespace(8), 1, &i.to_be_bytes())))
        .collect();
    c.execute(&mut ops).unwrap();
    assert_eq!(
        c.counters().round_trips,
        rt + 1,
        "one round trip for a batch spanning every node"
    );
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(ops.value(*id), Some(&(i as u32).to_le_bytes()[..]));
    }

    // A stale slot map: the batch is answered MOVED, the client relearns and retries.
    c.scramble_slots_for_test();
    ops.clear();
    let ids: Vec<_> = (0..300u32)
        .map(|i| ops.get(Key::new(Namespace(8), 1, &i.to_be_bytes())))
        .collect();
    c.execute(&mut ops).unwrap();
    assert!(ids
        .iter()
        .enumerate()
        .all(|(i, id)| ops.value(*id) == Some(&(i as u32).to_le_bytes()[..])));
}

#[test]
fn cluster_pools_are_exclusive_across_instances() {
    let cluster = RedisCluster::start(3).expect("start a 3-node cluster");
    let url = cluster.url();
    let pool = Key::new(Namespace(2), 9, b"nat-ports");
    let mut ops = Ops::new();
    ops.pool_init(pool, 600);
    ClusterStore::open(&url).unwrap().execute(&mut ops).unwrap();
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || {
                let mut s = ClusterStore::open(&url).unwrap();
                let mut ops = Ops::new();
                let mut got = Vec::new();
                for _ in 0..10 {
                    ops.clear();
                    let ids: Vec<_> = (0..20).map(|_| ops.pool_alloc(pool)).collect();
                    s.execute(&mut ops).unwrap();
                    got.extend(ids.iter().filter_map(|&i| ops.allocated(i)));
                }
                got
            })
        })
        .collect();
    let all: Vec<u64> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    assert_eq!(all.len(), 600);
    assert_eq!(all.iter().collect::<HashSet<_>>().len(), 600);
}

#[test]
fn bad_cluster_urls_and_dead_nodes_are_errors() {
    assert!(ClusterStore::open("redis-cluster://").is_err());
    assert!(ClusterStore::open("redis-cluster://nohostport").is_err());
    let mut cluster = RedisCluster::start(3).expect("start a 3-node cluster");
    let mut c = ClusterStore::open(&cluster.url()).unwrap();
    cluster.nodes[1].kill();
    let mut ops = Ops::new();
    for i in 0..100u32 {
        ops.get(Key::new(Namespace(8), 1, &i.to_be_bytes()));
    }
    assert!(
        c.execute(&mut ops).is_err(),
        "a batch touching a dead primary fails, without panicking"
    );
}

#[test]
fn cluster_unacked_writes_reach_every_node_and_redirects_are_failures() {
    let cluster = RedisCluster::start(3).expect("start a 3-node cluster");
    let mut c = ClusterStore::open(&cluster.url()).unwrap();
    let key = |i: u32| Key::new(Namespace(9), 1, &i.to_be_bytes());
    let mut ops = Ops::new();
    for i in 0..300u32 {
        ops.put(key(i), &i.to_le_bytes());
    }
    c.execute_unacked(&mut ops).unwrap();
    assert_eq!(c.counters().round_trips, 0, "sent without waiting");
    ops.clear();
    let ids: Vec<_> = (0..300u32).map(|i| ops.get(key(i))).collect();
    c.execute(&mut ops).unwrap();
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(ops.value(*id), Some(&(i as u32).to_le_bytes()[..]));
    }
    assert_eq!(c.take_unacked_failures(), 0);
    // With a stale slot map, writes land on the wrong node: answered MOVED,
    // not applied, and reported.
    c.scramble_slots_for_test();
    ops.clear();
    for i in 0..300u32 {
        ops.put(key(i), b"new");
    }
    c.execute_unacked(&mut ops).unwrap();
    c.sync().unwrap();
    assert!(c.take_unacked_failures() > 0);
}

fn key(i: u32) -> Key {
    Key::new(Namespace(11), 1, &i.to_be_bytes())
}

/// Reads keys `0..n` back, retrying while the cluster fails over (real
/// processes: a replica takes over after the node timeout).
fn read_back(c: &mut ClusterStore, n: u32) -> Vec<Option<Vec<u8>>> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut ops = Ops::new();
    loop {
        ops.clear();
        let ids: Vec<_> = (0..n).map(|i| ops.get(key(i))).collect();
        match c.execute(&mut ops) {
            Ok(()) => {
                return ids
                    .iter()
                    .map(|&id| ops.value(id).map(<[u8]>::to_vec))
                    .collect()
            }
            Err(e) if std::time::Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) => panic!("the cluster did not recover: {e}"),
        }
    }
}

#[test]
fn a_replicated_cluster_keeps_every_acknowledged_write_when_a_primary_dies() {
    let mut cluster = RedisCluster::start_replicated(3, 1, 1000).expect("start 3+3 nodes");
    // Defaults: every batch's writes wait for one replica.
    let mut c = ClusterStore::open(&cluster.url()).unwrap();
    let mut ops = Ops::new();
    for b in 0..30u32 {
        ops.clear();
        for i in b * 100..(b + 1) * 100 {
            ops.put(key(i), &i.to_le_bytes());
        }
        c.execute(&mut ops).unwrap();
    }
    let k = c.counters();
    assert!(
        k.replica_waits >= 30,
        "each batch touches every primary and waits on each: {k:?}"
    );
    assert_eq!(k.replica_shortfalls, 0, "{k:?}");
    // The primary dies right after acknowledging: what it acknowledged was
    // already on its replica, which takes over.
    cluster.nodes[0].kill();
    cluster.await_failover(0).expect("a replica takes over");
    let got = read_back(&mut c, 3000);
    let lost: Vec<u32> = (0..3000u32)
        .filter(|&i| got[i as usize].as_deref() != Some(&i.to_le_bytes()[..]))
        .collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged writes lost: {:?}...",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    // And the new primary takes writes.
    ops.clear();
    ops.put(key(0), b"after");
    c.execute(&mut ops).unwrap();
}

#[test]
fn a_hung_replica_slows_one_batch_not_the_data_plane() {
    let cluster = RedisCluster::start_replicated(1, 1, 1000).expect("start 1+1 nodes");
    let url = format!("{}?wait_ms=30", cluster.url());
    let mut c = ClusterStore::open(&url).unwrap();
    let mut ops = Ops::new();
    ops.put(key(1), b"x");
    c.execute(&mut ops).unwrap();
    assert_eq!(
        (c.counters().replica_waits, c.counters().replica_shortfalls),
        (1, 0)
    );
    cluster.replicas[0].pause();
    for i in 0..20u32 {
        ops.clear();
        ops.put(key(i), b"y");
        c.execute(&mut ops)
            .expect("writes go on without their replica");
    }
    let k = c.counters();
    cluster.replicas[0].resume();
    assert_eq!(
        k.replica_shortfalls, 1,
        "one batch found the replica gone (after waiting twice); later ones did not wait for it: {k:?}"
    );
    assert_eq!(k.replica_waits, 2, "{k:?}");
    assert_eq!(k.replica_rewaits, 0, "{k:?}");
    // Reads never wait.
    ops.clear();
    ops.get(key(1));
    c.execute(&mut ops).unwrap();
    assert_eq!(c.counters().replica_waits, 2);
}

#[test]
fn a_lagging_replica_is_waited_for_again_not_given_up_on() {
    // The replica stops for 100 ms, longer than `wait_ms` but shorter than
    // the second wait: the batch's writes still reach it before the batch is
    // answered, and the next batch waits as usual (no unwaited window in
    // which a primary's death could lose writes).
    let cluster = RedisCluster::start_replicated(1, 1, 1000).expect("start 1+1 nodes");
    let url = format!("{}?wait_ms=20&rewait_ms=900", cluster.url());
    let mut c = ClusterStore::open(&url).unwrap();
    let mut ops = Ops::new();
    ops.put(key(1), b"x");
    c.execute(&mut ops).unwrap();
    let replica = &cluster.replicas[0];
    replica.pause();
    std::thread::scope(|s| {
        s.spawn(|| {
            // A real process: the sleep is its lag.
            std::thread::sleep(std::time::Duration::from_millis(100));
            replica.resume();
        });
        ops.clear();
        ops.put(key(2), b"y");
        c.execute(&mut ops).expect("the write goes on");
    });
    let k = c.counters();
    assert_eq!(
        (k.replica_waits, k.replica_rewaits, k.replica_shortfalls),
        (2, 1, 0),
        "the first wait fell short, the second was acknowledged: {k:?}"
    );
    ops.clear();
    ops.put(key(3), b"z");
    c.execute(&mut ops).unwrap();
    let k = c.counters();
    assert_eq!(
        (k.replica_waits, k.replica_shortfalls),
        (3, 0),
        "the next batch waits again: {k:?}"
    );
}

#[test]
fn without_a_second_wait_a_lagging_replica_is_given_up_on() {
    // The control: with `rewait_ms=0` the same lag is a shortfall.
    let cluster = RedisCluster::start_replicated(1, 1, 1000).expect("start 1+1 nodes");
    let url = format!("{}?wait_ms=20&rewait_ms=0", cluster.url());
    let mut c = ClusterStore::open(&url).unwrap();
    let mut ops = Ops::new();
    ops.put(key(1), b"x");
    c.execute(&mut ops).unwrap();
    cluster.replicas[0].pause();
    ops.clear();
    ops.put(key(2), b"y");
    c.execute(&mut ops).expect("the write goes on");
    cluster.replicas[0].resume();
    ops.clear();
    ops.put(key(3), b"z");
    c.execute(&mut ops).unwrap();
    let k = c.counters();
    assert_eq!(
        (k.replica_waits, k.replica_rewaits, k.replica_shortfalls),
        (2, 0, 1),
        "short once, then unwaited: {k:?}"
    );
}

#[test]
fn without_replicas_nothing_waits() {
    let cluster = RedisCluster::start(2).expect("start a 2-node cluster");
    let mut c = ClusterStore::open(&cluster.url()).unwrap();
    let mut ops = Ops::new();
    ops.put(key(1), b"x");
    c.execute(&mut ops).unwrap();
    assert_eq!(c.counters().replica_waits, 0);
}

#[test]
fn a_dead_primary_does_not_desynchronize_the_live_ones() {
    let mut cluster = RedisCluster::start(3).expect("start a 3-node cluster");
    let mut c = ClusterStore::open(&cluster.url()).unwrap();
    let mut ops = Ops::new();
    for i in 0..300u32 {
        ops.put(key(i), &i.to_le_bytes());
    }
    c.execute(&mut ops).unwrap();
    cluster.nodes[1].kill();
    ops.clear();
    for i in 0..300u32 {
        ops.get(key(i));
    }
    assert!(
        c.execute(&mut ops).is_err(),
        "a batch touching the dead primary fails"
    );
    // The live primaries were sent that batch too: their unread replies must
    // not answer what comes next.
    let mut live = 0;
    for i in 0..300u32 {
        ops.clear();
        let id = ops.get(key(i));
        if c.execute(&mut ops).is_ok() {
            assert_eq!(ops.value(id), Some(&i.to_le_bytes()[..]), "key {i}");
            live += 1;
        }
    }
    assert!(
        live >= 150,
        "the two live primaries answer for their keys: {live}"
    );
}
