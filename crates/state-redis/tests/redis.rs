//! The Redis backend against a real redis-server started by the test, compared with
//! the in-process backend operation by operation.

use std::collections::HashSet;

use sluice_state::{Key, LocalStore, Namespace, Ops, StateStore, StoreError};
use sluice_state_redis::server::RedisServer;
use sluice_state_redis::RedisStore;

mod common;
use common::scenario;

fn server() -> RedisServer {
    RedisServer::start(&[]).expect("start redis-server")
}

fn k(t: u8, p: &[u8]) -> Key {
    Key::new(Namespace(3), t, p)
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
    let takes: Vec<_> = a.iter().filter(|l| l.starts_with("take")).collect();
    assert_eq!(
        takes,
        ["take [0, 1, 2]", "take [3, 4, 1, 0]", "take []", "take []"],
        "{a:?}"
    );
    // One round trip for the whole batch, plus one per take_expired.
    assert_eq!(redis.counters().round_trips, 4);
    assert_eq!(redis.describe(), srv.url());
}

#[test]
fn a_store_that_never_polls_behaves_the_same() {
    let srv = server();
    let mut polling = RedisStore::open(&srv.url()).unwrap();
    let a = scenario(&mut polling);
    let srv2 = server();
    let mut sleeping = RedisStore::open(&format!("{}?poll_us=0", srv2.url())).unwrap();
    assert_eq!(scenario(&mut sleeping), a);
}

#[test]
fn info_fields_count_the_commands_a_store_sends() {
    let srv = server();
    let port = srv.port();
    let field = |f: &str| sluice_state_redis::server::info_field(port, "stats", f);
    let before = field("total_commands_processed").unwrap();
    let mut redis = RedisStore::open(&srv.url()).unwrap();
    let mut ops = Ops::new();
    for i in 0..10u8 {
        ops.put(k(1, &[i]), &[i]);
    }
    redis.execute(&mut ops).unwrap();
    let after = field("total_commands_processed").unwrap();
    // Connecting loads the function library; the puts travel as one MSET,
    // and each INFO counts itself.
    assert!(after > before + 1, "{before} -> {after}");
    assert!(field("no_such_field")
        .unwrap_err()
        .contains("no_such_field"));
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
        .map(|t| {
            let url = url.clone();
            std::thread::spawn(move || {
                let mut s = RedisStore::open(&url).unwrap();
                let mut got = Vec::new();
                let mut ops = Ops::new();
                // Half the instances take one item per operation, half twenty.
                let mut take = |s: &mut RedisStore, got: &mut Vec<u64>| {
                    ops.clear();
                    if t % 2 == 0 {
                        let ids: Vec<_> = (0..20).map(|_| ops.pool_alloc(pool)).collect();
                        s.execute(&mut ops).unwrap();
                        got.extend(ids.iter().filter_map(|&i| ops.allocated(i)));
                    } else {
                        let id = ops.pool_take(pool, 20);
                        s.execute(&mut ops).unwrap();
                        got.extend(ops.taken(id));
                    }
                };
                for _ in 0..25 {
                    take(&mut s, &mut got);
                }
                // Every item is out; give some back and race for the freed ones.
                let mut back = Ops::new();
                for it in got.drain(..100) {
                    back.pool_free(pool, it);
                }
                s.execute(&mut back).unwrap();
                for _ in 0..5 {
                    take(&mut s, &mut got);
                }
                got
            })
        })
        .collect();
    let all: Vec<u64> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let unique: HashSet<_> = all.iter().collect();
    assert_eq!(unique.len(), all.len(), "an item was handed out twice");
    assert_eq!(all.len(), 2000, "every freed item was taken again");
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

/// Without a user the backend loads its function library itself: a server
/// that lost it (`FUNCTION FLUSH`, or a restart) fails one batch, naming the
/// library, and the next batch reconnects and loads it again.
#[test]
fn a_flushed_library_fails_one_batch_then_is_loaded_again() {
    let srv = server();
    let mut s = RedisStore::open(&srv.url()).unwrap();
    let mut admin = std::net::TcpStream::connect(("127.0.0.1", srv.port())).unwrap();
    use std::io::{Read, Write};
    admin.write_all(b"FUNCTION FLUSH\r\n").unwrap();
    let mut buf = [0u8; 16];
    let n = admin.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"+OK"), "{:?}", &buf[..n]);
    let mut ops = Ops::new();
    ops.pool_init(k(3, b"p"), 4);
    let e = s.execute(&mut ops).unwrap_err().to_string();
    assert!(
        e.contains("pool_init") && e.contains("no function library sluice_v1"),
        "{e}"
    );
    ops.clear();
    let id = ops.pool_init(k(3, b"p"), 4);
    s.execute(&mut ops).unwrap();
    assert!(ops.swapped(id));
}

/// Loading the library is a write: a server that refuses writes (too few
/// replicas; out of memory) still takes connections and reads, and a call
/// that needs the missing library says why it is missing.
#[test]
fn a_server_refusing_writes_still_connects_and_names_the_refused_load() {
    for (setting, refusal) in [
        (["--min-replicas-to-write", "1"], "NOREPLICAS"),
        (["--maxmemory", "100kb"], "OOM"),
    ] {
        let srv = RedisServer::start(&setting).expect("start redis-server");
        let mut s = RedisStore::open(&srv.url()).unwrap();
        let mut ops = Ops::new();
        let g = ops.get(k(1, b"x"));
        s.execute(&mut ops).unwrap();
        assert_eq!(ops.value(g), None);
        ops.clear();
        ops.pool_init(k(3, b"p"), 4);
        let e = s.execute(&mut ops).unwrap_err().to_string();
        assert!(
            e.contains("no function library sluice_v1") && e.contains(refusal),
            "{e}"
        );
    }
}

#[test]
fn unacked_writes_cost_no_round_trip_and_are_seen_in_order() {
    let srv = server();
    let mut s = RedisStore::open(&srv.url()).unwrap();
    let mut ops = Ops::new();
    // Many sends and no waiting call in between: replies are read ahead
    // without waiting, and what is left by the next round trip.
    for round in 0..200u32 {
        ops.clear();
        for i in 0..100u32 {
            ops.put(k(1, &i.to_be_bytes()), &round.to_be_bytes());
        }
        s.execute_unacked(&mut ops).unwrap();
    }
    assert_eq!(s.counters().round_trips, 0);
    assert_eq!(s.counters().writes, 20_000);
    ops.clear();
    let ids: Vec<_> = (0..100u32)
        .map(|i| ops.get(k(1, &i.to_be_bytes())))
        .collect();
    s.execute(&mut ops).unwrap();
    for id in ids {
        assert_eq!(ops.value(id), Some(&199u32.to_be_bytes()[..]));
    }
    assert_eq!(s.counters().round_trips, 1);
    assert_eq!(s.take_unacked_failures(), 0);
    s.sync().unwrap();
}

#[test]
fn failed_unacked_writes_are_reported() {
    let srv = server();
    let mut s = RedisStore::open(&srv.url()).unwrap();
    let mut ops = Ops::new();
    ops.put(k(2, b"text"), b"not a number");
    s.execute(&mut ops).unwrap();
    ops.clear();
    ops.incr(k(2, b"text"), 1);
    ops.put(k(2, b"ok"), b"1");
    s.execute_unacked(&mut ops).unwrap();
    // The barrier reads the replies: one error among them.
    s.sync().unwrap();
    assert_eq!(s.take_unacked_failures(), 1);
    assert_eq!(s.take_unacked_failures(), 0, "taking resets");
    ops.clear();
    let g = ops.get(k(2, b"ok"));
    s.execute(&mut ops).unwrap();
    assert_eq!(ops.value(g), Some(&b"1"[..]));
}

#[test]
fn lost_connection_counts_unacked_writes_as_failed() {
    let srv = server();
    let mut s = RedisStore::open(&srv.url()).unwrap();
    let mut ops = Ops::new();
    ops.put(k(3, b"a"), b"1");
    s.execute_unacked(&mut ops).unwrap();
    drop(srv);
    let r = s.sync();
    let failed = s.take_unacked_failures();
    // Either the reply made it before the server died (and sync succeeded) or
    // the write counts as failed: never silently both lost and unreported.
    assert!(
        r.is_ok() && failed == 0 || r.is_err() && failed == 1,
        "{r:?} {failed}"
    );
}

#[test]
fn unacked_runs_of_puts_and_deletes_apply_in_order() {
    let srv = server();
    let mut s = RedisStore::open(&srv.url()).unwrap();
    let mut ops = Ops::new();
    ops.put(k(4, b"a"), b"1");
    ops.put(k(4, b"b"), b"1");
    ops.put(k(4, b"a"), b"2");
    ops.delete(k(4, b"b"));
    ops.delete(k(4, b"c"));
    ops.put(k(4, b"c"), b"3");
    ops.incr(k(4, b"n"), 5);
    ops.put(k(4, b"d"), b"4");
    s.execute_unacked(&mut ops).unwrap();
    assert_eq!(s.counters().writes, 7);
    ops.clear();
    let ids: Vec<_> = [b"a", b"b", b"c", b"d"]
        .iter()
        .map(|n| ops.get(k(4, &n[..])))
        .collect();
    let n = ops.incr(k(4, b"n"), 0);
    s.execute(&mut ops).unwrap();
    let got: Vec<_> = ids
        .iter()
        .map(|&id| ops.value(id).map(|v| v.to_vec()))
        .collect();
    assert_eq!(
        got,
        vec![
            Some(b"2".to_vec()),
            None,
            Some(b"3".to_vec()),
            Some(b"4".to_vec())
        ]
    );
    assert_eq!(ops.counter(n), 5);
    assert_eq!(s.take_unacked_failures(), 0);
}

#[test]
fn started_reads_overlap_unacked_writes_and_settle_in_order() {
    let srv = server();
    let mut s = RedisStore::open(&srv.url()).unwrap();
    let mut w = Ops::new();
    w.put(k(5, b"a"), b"1");
    s.execute_unacked(&mut w).unwrap();
    let (sent_before, _) = s.poll_unacked().unwrap();
    assert_eq!(sent_before, 1);

    // A started read sees the write sent before it, not the one sent after.
    let mut r = Ops::new();
    let ga = r.get(k(5, b"a"));
    let gb = r.get(k(5, b"b"));
    s.start(&mut r).unwrap();
    w.clear();
    w.put(k(5, b"b"), b"x");
    w.incr(k(5, b"b"), 1); // an error reply: "b" is not a number
    s.execute_unacked(&mut w).unwrap();
    // The started reads count as sent without waiting, like the writes.
    let (sent, settled) = s.poll_unacked().unwrap();
    assert_eq!(sent, 5);
    assert!(
        settled <= 1,
        "the started reads are not answered before finish reads them"
    );
    // Calls that wait are refused until the started call is finished, and the
    // connection stays usable.
    assert!(matches!(
        s.execute(&mut Ops::new()),
        Ok(()) // nothing to send: allowed
    ));
    let mut other = Ops::new();
    other.get(k(5, b"a"));
    assert!(matches!(
        s.execute(&mut other),
        Err(StoreError::Protocol(_))
    ));
    assert!(matches!(s.sync(), Err(StoreError::Protocol(_))));
    s.finish(&mut r).unwrap();
    assert_eq!(r.value(ga), Some(&b"1"[..]));
    assert_eq!(r.value(gb), None);
    assert_eq!(
        s.counters().round_trips,
        1,
        "start/finish is one round trip"
    );

    // Everything settles; the failed increment is reported once.
    s.sync().unwrap();
    assert_eq!(s.poll_unacked().unwrap(), (5, 5));
    assert_eq!(s.take_unacked_failures(), 1);
    let mut g = Ops::new();
    let gb = g.get(k(5, b"b"));
    s.execute(&mut g).unwrap();
    assert_eq!(g.value(gb), Some(&b"x"[..]));
    assert!(s.finish(&mut r).is_ok(), "nothing started: nothing to do");
}
