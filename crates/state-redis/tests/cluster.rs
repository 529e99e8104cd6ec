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
