//! The Redis backend against a real redis-server started by the test, compared with
//! the in-process backend operation by operation.

use std::collections::HashSet;

use sluice_state::{Key, LocalStore, Namespace, Ops, StateStore, StoreError};
use sluice_state_redis::server::RedisServer;
use sluice_state_redis::RedisStore;

fn server() -> RedisServer {
    RedisServer::start(&[]).expect("start redis-server")
}

fn k(t: u8, p: &[u8]) -> Key {
    Key::new(Namespace(3), t, p)
}

/// A script of operations exercising every kind, with its results rendered as text.
fn scenario(store: &mut dyn StateStore) -> Vec<String> {
    let mut out = Vec::new();
    let mut ops = Ops::new();
    let g0 = ops.get(k(1, b"a"));
    ops.put(k(1, b"a"), b"v1\x00\xff");
    let g1 = ops.get(k(1, b"a"));
    let c1 = ops.compare_and_set_raw(k(1, b"a"), Some(b"nope"), Some(b"x"));
    let c2 = ops.compare_and_set_raw(k(1, b"a"), Some(b"v1\x00\xff"), Some(b"v2"));
    let c3 = ops.compare_and_set_raw(k(1, b"b"), None, Some(b"new"));
    let c4 = ops.compare_and_set_raw(k(1, b"b"), None, Some(b"again"));
    let g2 = ops.get(k(1, b"a"));
    ops.delete(k(1, b"a"));
    let g3 = ops.get(k(1, b"a"));
    let i1 = ops.incr(k(2, b"load"), 5);
    let i2 = ops.incr(k(2, b"load"), -7);
    let p0 = ops.pool_init(k(3, b"pool"), 3);
    let p1 = ops.pool_init(k(3, b"pool"), 100);
    let allocs: Vec<_> = (0..4).map(|_| ops.pool_alloc(k(3, b"pool"))).collect();
    ops.pool_free(k(3, b"pool"), 1);
    ops.pool_free(k(3, b"pool"), 1);
    ops.pool_free(k(3, b"pool"), 7);
    let a5 = ops.pool_alloc(k(3, b"pool"));
    let a6 = ops.pool_alloc(k(3, b"pool"));
    let nopool = ops.pool_alloc(k(3, b"missing"));
    ops.arm_timer(k(4, b"t1"), 5_000_000);
    ops.arm_timer(k(4, b"t2"), 1_000_000);
    ops.arm_timer(k(4, b"t3"), 9_000_000);
    ops.cancel_timer(k(4, b"t3"));
    store.execute(&mut ops).unwrap();
    for id in [g0, g1, g2, g3] {
        out.push(format!("{:?}", ops.value(id)));
    }
    for id in [c1, c2, c3, c4, p0, p1] {
        out.push(format!("swapped {}", ops.swapped(id)));
    }
    out.push(format!("counters {} {}", ops.counter(i1), ops.counter(i2)));
    for id in allocs.iter().chain([&a5, &a6, &nopool]) {
        out.push(format!("alloc {:?}", ops.allocated(*id)));
    }
    let mut t = Vec::new();
    store
        .take_expired(Namespace(3), 4_000_000, 10, &mut t)
        .unwrap();
    store
        .take_expired(Namespace(3), 4_000_000, 10, &mut t)
        .unwrap();
    store
        .take_expired(Namespace(3), 10_000_000, 10, &mut t)
        .unwrap();
    out.push(format!("timers {t:?}"));
    out
}

#[test]
fn redis_behaves_like_the_local_store() {
    let srv = server();
    let mut redis = RedisStore::open(&srv.url()).unwrap();
    let mut local = LocalStore::new();
    let a = scenario(&mut local);
    let b = scenario(&mut redis);
    assert_eq!(a, b);
    assert!(
        a.iter().any(|l| l == "alloc Some(1)"),
        "the freed item is reused: {a:?}"
    );
    // One round trip for the whole batch, plus one per take_expired.
    assert_eq!(redis.counters().round_trips, 4);
    assert_eq!(redis.describe(), srv.url());
}

#[test]
fn concurrent_instances_never_share_a_pool_item() {
    let srv = server();
    let url = srv.url();
    let pool = k(9, b"ports");
    let mut setup = RedisStore::open(&url).unwrap();
    let mut ops = Ops::new();
    ops.pool_init(pool, 2000);
    setup.execute(&mut ops).unwrap();
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || {
                let mut s = RedisStore::open(&url).unwrap();
                let mut got = Vec::new();
                let mut ops = Ops::new();
                for _ in 0..25 {
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
    assert_eq!(all.len(), 2000);
    let unique: HashSet<_> = all.iter().collect();
    assert_eq!(unique.len(), 2000, "an item was handed out twice");
}

#[test]
fn each_timer_fires_on_exactly_one_instance() {
    let srv = server();
    let mut s = RedisStore::open(&srv.url()).unwrap();
    let mut ops = Ops::new();
    for i in 0..500u32 {
        ops.arm_timer(
            Key::new(Namespace(5), 1, &i.to_be_bytes()),
            1_000 + i as u64,
        );
    }
    s.execute(&mut ops).unwrap();
    let url = srv.url();
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || {
                let mut s = RedisStore::open(&url).unwrap();
                let mut got = Vec::new();
                for _ in 0..100 {
                    s.take_expired(Namespace(5), 1_000_000, 7, &mut got)
                        .unwrap();
                }
                got
            })
        })
        .collect();
    let all: Vec<Key> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    assert_eq!(all.len(), 500);
    assert_eq!(all.iter().collect::<HashSet<_>>().len(), 500);
}

#[test]
fn failures_are_errors_and_the_next_batch_reconnects() {
    let mut srv = server();
    let port = srv.port();
    let mut s = RedisStore::open(&srv.url()).unwrap();
    let mut ops = Ops::new();
    ops.put(k(1, b"x"), b"1");
    s.execute(&mut ops).unwrap();
    srv.kill();
    ops.clear();
    ops.get(k(1, b"x"));
    assert!(matches!(
        s.execute(&mut ops),
        Err(StoreError::Unavailable(_))
    ));
    assert!(matches!(
        s.execute(&mut ops),
        Err(StoreError::Unavailable(_))
    ));
    // Nothing listens on the port any more: connecting is an error, not a panic.
    assert!(RedisStore::open(&format!("redis://127.0.0.1:{port}")).is_err());
    assert!(RedisStore::open("not a url").is_err());
    // The server comes back (empty, no persistence): the same store object reconnects
    // on its next batch and reloads its scripts.
    srv.restart().unwrap();
    ops.clear();
    let g = ops.get(k(1, b"x"));
    let p = ops.pool_init(k(3, b"p"), 2);
    s.execute(&mut ops).unwrap();
    assert_eq!(ops.value(g), None);
    assert!(ops.swapped(p));
}

#[test]
fn flushed_scripts_fail_one_batch_then_recover() {
    let srv = server();
    let mut s = RedisStore::open(&srv.url()).unwrap();
    let mut admin = std::net::TcpStream::connect(("127.0.0.1", srv.port())).unwrap();
    use std::io::{Read, Write};
    admin.write_all(b"SCRIPT FLUSH\r\n").unwrap();
    let mut buf = [0u8; 16];
    let _ = admin.read(&mut buf).unwrap();
    let mut ops = Ops::new();
    ops.pool_init(k(3, b"p"), 4);
    assert!(matches!(s.execute(&mut ops), Err(StoreError::Refused(m)) if m.contains("NOSCRIPT")));
    ops.clear();
    let id = ops.pool_init(k(3, b"p"), 4);
    s.execute(&mut ops).unwrap();
    assert!(ops.swapped(id));
}
