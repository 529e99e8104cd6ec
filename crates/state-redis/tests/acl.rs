//! Store isolation against a real redis-server with ACLs: a tenant's user works
//! for every operation the backend has (so a command missing from
//! `acl::TENANT_COMMANDS` fails here) and for nothing of another tenant's, and
//! it cannot put code of its own on the shared server.

use std::path::PathBuf;

use sluice_state::{Key, LocalStore, Namespace, Ops, StateStore, StoreError};
use sluice_state_redis::acl::{tenant_prefix, tenant_user, Admin, Value};
use sluice_state_redis::scripts::{LIBRARY, LIBRARY_NAME};
use sluice_state_redis::server::RedisServer;
use sluice_state_redis::{Config, RedisStore, Secret};

mod common;
use common::scenario;

const ADMIN_PW: &str = "admin-pw-7f3a";
const A_PW: &str = "tenant-a-pw-91c2";
const B_PW: &str = "tenant-b-pw-04d8";

/// A password file in a directory removed on drop.
struct Files(PathBuf);

impl Files {
    fn new(tag: &str) -> Files {
        let d = std::env::temp_dir().join(format!("sluice-acl-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Files(d)
    }

    fn password(&self, name: &str, pw: &str) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, pw).unwrap();
        p.display().to_string()
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A server with authentication on (default user off), users of tenants `a`
/// and `b`, the backend's function library, and the files holding every
/// password.
fn secured(tag: &str) -> (RedisServer, Files) {
    let mut srv = RedisServer::start(&[]).expect("start redis-server");
    srv.secure("admin", &Secret::new(ADMIN_PW)).unwrap();
    let files = Files::new(tag);
    let admin_url = format!(
        "redis://admin@127.0.0.1:{}?password_file={}",
        srv.port(),
        files.password("admin", ADMIN_PW)
    );
    let mut admin = Admin::open(&admin_url).unwrap();
    admin.set_tenant_user("a", &Secret::new(A_PW)).unwrap();
    admin.set_tenant_user("b", &Secret::new(B_PW)).unwrap();
    assert_eq!(
        admin.tenant_users().unwrap(),
        [tenant_user("a"), tenant_user("b")]
    );
    assert_eq!(admin.load_library().unwrap(), 1, "loaded on the one node");
    assert_eq!(admin.load_library().unwrap(), 0, "already there: kept");
    (srv, files)
}

/// The admin connection of a [`secured`] server.
fn admin_of(srv: &RedisServer, f: &Files) -> Admin {
    Admin::open(&format!(
        "redis://admin@127.0.0.1:{}?password_file={}",
        srv.port(),
        f.password("admin", ADMIN_PW)
    ))
    .unwrap()
}

/// The URL tenant `t`'s instances get, with the password of `pw_of` and the
/// key prefix of `prefix_of` (`None`: no prefix).
fn url(srv: &RedisServer, f: &Files, t: &str, pw: &str, prefix_of: Option<&str>) -> String {
    let file = f.password(&format!("pw-{t}-{pw}"), pw);
    let prefix = prefix_of.map_or(String::new(), |p| format!("&prefix={}", tenant_prefix(p)));
    format!(
        "redis://{}@127.0.0.1:{}?password_file={file}{prefix}",
        tenant_user(t),
        srv.port()
    )
}

fn k(p: &[u8]) -> Key {
    Key::new(Namespace(9), 1, p)
}

fn assert_noperm(r: Result<(), StoreError>, user: &str, what: &str) {
    let e = r.expect_err(what).to_string();
    assert!(
        e.contains("NOPERM") && e.contains(&format!("store user `{user}`")),
        "{what}: {e}"
    );
}

#[test]
fn a_tenant_user_can_run_every_store_operation_under_its_prefix() {
    let (srv, f) = secured("every");
    let mut a = RedisStore::open(&url(&srv, &f, "a", A_PW, Some("a"))).unwrap();
    // Every kind of operation, timers and pools included, gives what the
    // in-process store gives: each command the backend sends is allowed.
    assert_eq!(scenario(&mut a), scenario(&mut LocalStore::new()));
    // The unacknowledged path batches puts into MSET and deletes into DEL.
    let mut w = Ops::new();
    w.put(k(b"x"), b"1");
    w.put(k(b"y"), b"2");
    w.delete(k(b"z"));
    w.delete(k(b"x"));
    a.execute_unacked(&mut w).unwrap();
    a.sync().unwrap();
    assert_eq!(a.take_unacked_failures(), 0);
    let mut r = Ops::new();
    let (gx, gy) = (r.get(k(b"x")), r.get(k(b"y")));
    a.execute(&mut r).unwrap();
    assert_eq!((r.value(gx), r.value(gy)), (None, Some(&b"2"[..])));
    assert_eq!(
        a.describe(),
        format!("redis://sluice-t-a@127.0.0.1:{}?prefix=t.a.", srv.port())
    );
}

#[test]
fn a_tenant_user_cannot_touch_another_tenants_keys_or_unprefixed_ones() {
    let (srv, f) = secured("cross");
    let mut b = RedisStore::open(&url(&srv, &f, "b", B_PW, Some("b"))).unwrap();
    let mut ops = Ops::new();
    ops.put(k(b"flow"), b"b's state");
    ops.arm_timer(k(b"flow"), 1_000);
    b.execute(&mut ops).unwrap();

    // Tenant a's user pretending to be b (b's prefix), or using no prefix at all.
    for prefix_of in [Some("b"), None] {
        let what = format!("a's user with the prefix of {prefix_of:?}");
        let mut a = RedisStore::open(&url(&srv, &f, "a", A_PW, prefix_of)).unwrap();
        let user = tenant_user("a");
        let mut read = Ops::new();
        read.get(k(b"flow"));
        assert_noperm(a.execute(&mut read), &user, &format!("{what}: GET"));
        let mut write = Ops::new();
        write.put(k(b"flow"), b"forged");
        assert_noperm(a.execute(&mut write), &user, &format!("{what}: SET"));
        // A function (FCALL) is refused the key as well.
        let mut cas = Ops::new();
        cas.compare_and_set_raw(k(b"flow"), Some(b"b's state"), Some(b"forged"));
        assert_noperm(a.execute(&mut cas), &user, &format!("{what}: FCALL"));
        let mut out = Vec::new();
        let taken = a.take_expired(Namespace(9), u64::MAX, 10, &mut out);
        assert_noperm(taken, &user, &format!("{what}: take_expired"));
        assert!(out.is_empty());
    }
    // b's state and timer are untouched.
    let mut read = Ops::new();
    let g = read.get(k(b"flow"));
    b.execute(&mut read).unwrap();
    assert_eq!(read.value(g), Some(&b"b's state"[..]));
    let mut out = Vec::new();
    b.take_expired(Namespace(9), u64::MAX, 10, &mut out)
        .unwrap();
    assert_eq!(out, [k(b"flow")]);
}

#[test]
fn wrong_or_missing_credentials_are_clear_errors_that_never_show_the_password() {
    let (srv, f) = secured("wrong");
    let e = RedisStore::open(&url(&srv, &f, "a", "not-the-password", Some("a")))
        .err()
        .expect("a wrong password is refused")
        .to_string();
    assert!(
        e.contains("authentication as store user `sluice-t-a` failed") && e.contains("WRONGPASS"),
        "{e}"
    );
    assert!(!e.contains("not-the-password"), "{e}");
    // b's password is not a's.
    let e = RedisStore::open(&url(&srv, &f, "a", B_PW, Some("a")))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("WRONGPASS") && !e.contains(B_PW), "{e}");
    // Without a user the default user is off: nothing works.
    let plain = format!("redis://127.0.0.1:{}", srv.port());
    let e = RedisStore::open(&plain).err().unwrap().to_string();
    assert!(e.contains("NOAUTH") || e.contains("NOPERM"), "{e}");

    // Nothing printable carries a password: the configuration, the store, errors.
    let cfg = Config::from_url(&url(&srv, &f, "a", A_PW, Some("a"))).unwrap();
    let shown = format!("{cfg:?} {} {:?}", cfg.describe(), cfg.auth);
    assert!(
        !shown.contains(A_PW) && shown.contains("<redacted>"),
        "{shown}"
    );
    let store = RedisStore::connect(cfg).unwrap();
    assert!(!store.describe().contains(A_PW));

    // A deleted user can no longer connect.
    let mut admin = Admin::open(&format!(
        "redis://admin@127.0.0.1:{}?password_file={}",
        srv.port(),
        f.password("admin", ADMIN_PW)
    ))
    .unwrap();
    admin.delete_user(&tenant_user("a")).unwrap();
    assert_eq!(admin.tenant_users().unwrap(), [tenant_user("b")]);
    let e = RedisStore::open(&url(&srv, &f, "a", A_PW, Some("a")))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("WRONGPASS"), "{e}");
}

#[test]
fn the_password_can_come_from_the_environment() {
    let (srv, _f) = secured("env");
    // The only test in this binary that sets the variable, and nothing here
    // reads it concurrently without a file.
    std::env::set_var(sluice_state_redis::PASSWORD_ENV, A_PW);
    let u = format!(
        "redis://{}@127.0.0.1:{}?prefix=t.a.",
        tenant_user("a"),
        srv.port()
    );
    let mut a = RedisStore::open(&u).unwrap();
    std::env::remove_var(sluice_state_redis::PASSWORD_ENV);
    let mut ops = Ops::new();
    let i = ops.incr(k(b"n"), 3);
    a.execute(&mut ops).unwrap();
    assert_eq!(ops.counter(i), 3);
}

#[test]
fn a_tenant_user_works_on_a_cluster_with_the_users_on_every_node() {
    use sluice_state_redis::server::RedisCluster;
    use sluice_state_redis::ClusterStore;
    let cluster = RedisCluster::start(3).expect("start a 3-node cluster");
    let f = Files::new("cluster");
    // The default user provisions here; ACL users are per node, so the admin
    // URL lists them all.
    let mut admin = Admin::open(&cluster.url()).unwrap();
    admin.set_tenant_user("a", &Secret::new(A_PW)).unwrap();
    admin.set_tenant_user("b", &Secret::new(B_PW)).unwrap();
    assert_eq!(admin.load_library().unwrap(), 3, "on every primary");
    let hosts = cluster
        .url()
        .trim_start_matches("redis-cluster://")
        .to_string();
    let url = |t: &str, pw: &str, prefix_of: &str| {
        format!(
            "redis-cluster://{}@{hosts}?prefix={}&password_file={}",
            tenant_user(t),
            tenant_prefix(prefix_of),
            f.password(&format!("c-{t}"), pw)
        )
    };
    let mut a = ClusterStore::open(&url("a", A_PW, "a")).unwrap();
    // Every operation, on keys spread over the three nodes.
    assert_eq!(scenario(&mut a), scenario(&mut LocalStore::new()));
    let mut b = ClusterStore::open(&url("b", B_PW, "b")).unwrap();
    let mut ops = Ops::new();
    for i in 0..32u8 {
        ops.put(k(&[b'f', i]), b"b's");
    }
    b.execute(&mut ops).unwrap();
    // Redirections (MOVED, then CLUSTER SLOTS) are allowed too.
    b.scramble_slots_for_test();
    let mut read = Ops::new();
    let ids: Vec<_> = (0..32u8).map(|i| read.get(k(&[b'f', i]))).collect();
    b.execute(&mut read).unwrap();
    assert!(ids.iter().all(|&id| read.value(id) == Some(&b"b's"[..])));
    let mut a_as_b = ClusterStore::open(&url("a", A_PW, "b")).unwrap();
    let mut read = Ops::new();
    for i in 0..32u8 {
        read.get(k(&[b'f', i]));
    }
    assert_noperm(a_as_b.execute(&mut read), &tenant_user("a"), "cluster GET");
    let e = ClusterStore::open(&url("a", B_PW, "a"))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("WRONGPASS") && !e.contains(B_PW), "{e}");
}

/// ACL users are per node: with one listed node dead (a killed cluster
/// primary), the live nodes still get every user defined or deleted, and the
/// failure names the dead node.
#[test]
fn a_dead_node_does_not_keep_users_off_the_live_ones() {
    let mut servers: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start(&[]).expect("start redis-server"))
        .collect();
    let hosts: Vec<String> = servers
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port()))
        .collect();
    let mut admin = Admin::open(&format!("redis-cluster://{}", hosts.join(","))).unwrap();
    admin.set_tenant_user("old", &Secret::new(A_PW)).unwrap();
    // The middle one: nodes after a dead one must be reached too.
    servers[1].kill();
    let e = admin
        .set_tenant_user("a", &Secret::new(A_PW))
        .unwrap_err()
        .to_string();
    assert!(e.contains(&hosts[1]) && !e.contains(A_PW), "{e}");
    let e = admin
        .delete_user(&tenant_user("old"))
        .unwrap_err()
        .to_string();
    assert!(e.contains(&hosts[1]), "{e}");
    // The library too reaches the live nodes, and the dead one is named.
    let e = admin.load_library().unwrap_err().to_string();
    assert!(e.contains(&hosts[1]), "{e}");
    assert_eq!(admin.load_library().unwrap_err().to_string(), e);
    // Answered by the live nodes.
    assert_eq!(admin.tenant_users().unwrap(), [tenant_user("a")]);
    for live in [0, 2] {
        let mut one = Admin::open(&format!("redis-cluster://{}", hosts[live])).unwrap();
        assert_eq!(one.tenant_users().unwrap(), [tenant_user("a")], "{live}");
        assert_eq!(one.load_library().unwrap(), 0, "{live} has it");
    }
    servers[0].kill();
    servers[2].kill();
    assert!(admin.tenant_users().is_err(), "no node answered");
}

/// A node restarted on the same port closed the admin's connection: the
/// next definition goes through on a new connection (once) instead of
/// failing, so a returning node gets the tenants' users on the first try.
#[test]
fn a_restarted_node_gets_definitions_on_a_new_connection() {
    let mut srv = RedisServer::start(&[]).expect("start redis-server");
    let mut admin = Admin::open(&srv.url()).unwrap();
    admin.set_tenant_user("a", &Secret::new(A_PW)).unwrap();
    srv.restart().expect("restart redis-server");
    // No persistence: the user is gone, and is defined again at once.
    admin.set_tenant_user("a", &Secret::new(A_PW)).unwrap();
    assert_eq!(admin.tenant_users().unwrap(), [tenant_user("a")]);
    // A node that stays down is still an error naming it.
    let addr = format!("127.0.0.1:{}", srv.port());
    srv.kill();
    let e = admin.tenant_users().unwrap_err().to_string();
    assert!(e.contains(&addr), "{e}");
}

/// Code that never returns: what a compromised instance would run to keep the
/// shared server busy for every tenant.
const BUSY: &str = "while true do end";

/// The attack of issue 21 replayed with a tenant's own password: every way of
/// putting Lua on the server or removing the backend's library is refused,
/// and the server keeps answering another tenant.
#[test]
fn a_tenant_user_cannot_load_run_or_remove_code() {
    let (srv, f) = secured("code");
    let mut a = Admin::open(&url(&srv, &f, "a", A_PW, Some("a"))).unwrap();
    let evil = format!("#!lua name=evil\nredis.register_function('evil', function() {BUSY} end)");
    let usurper = format!("#!lua name={LIBRARY_NAME}\nredis.register_function('{LIBRARY_NAME}_cas', function() {BUSY} end)");
    let sha = "0123456789abcdef0123456789abcdef01234567";
    let attempts: Vec<(&str, Vec<&[u8]>)> = vec![
        ("script|load", vec![b"SCRIPT", b"LOAD", BUSY.as_bytes()]),
        ("eval", vec![b"EVAL", BUSY.as_bytes(), b"0"]),
        ("eval_ro", vec![b"EVAL_RO", BUSY.as_bytes(), b"0"]),
        ("evalsha", vec![b"EVALSHA", sha.as_bytes(), b"0"]),
        ("evalsha_ro", vec![b"EVALSHA_RO", sha.as_bytes(), b"0"]),
        ("function|load", vec![b"FUNCTION", b"LOAD", evil.as_bytes()]),
        (
            "function|load",
            vec![b"FUNCTION", b"LOAD", b"REPLACE", usurper.as_bytes()],
        ),
        (
            "function|delete",
            vec![b"FUNCTION", b"DELETE", LIBRARY_NAME.as_bytes()],
        ),
        ("function|flush", vec![b"FUNCTION", b"FLUSH"]),
        (
            "function|restore",
            vec![b"FUNCTION", b"RESTORE", b"\x00", b"REPLACE"],
        ),
        ("function|kill", vec![b"FUNCTION", b"KILL"]),
        ("script|flush", vec![b"SCRIPT", b"FLUSH"]),
        ("script|kill", vec![b"SCRIPT", b"KILL"]),
        (
            "config|set",
            vec![b"CONFIG", b"SET", b"busy-reply-threshold", b"0"],
        ),
    ];
    for (cmd, args) in &attempts {
        match a.command(0, args).unwrap() {
            Value::Error(e) => assert!(
                e.starts_with("NOPERM") && e.contains(&format!("'{cmd}'")),
                "{cmd}: {e}"
            ),
            other => panic!("{cmd} was not refused: {other:?}"),
        }
    }
    // The library is the backend's, unchanged, and nothing else was loaded.
    let mut admin = admin_of(&srv, &f);
    assert_eq!(admin.load_library().unwrap(), 0);
    let all = admin
        .command(0, &[b"FUNCTION", b"LIST", b"WITHCODE"])
        .unwrap();
    let Value::Array(Some(libs)) = &all else {
        panic!("FUNCTION LIST: {all:?}")
    };
    assert_eq!(libs.len(), 1, "{all:?}");
    assert!(format!("{all:?}").contains(&format!("{:?}", LIBRARY.as_bytes())));
    // A positive control: the admin may load code, so NOPERM above was the
    // tenant's ACL and not a command this server lacks.
    let r = admin
        .command(0, &[b"SCRIPT", b"LOAD", b"return 1"])
        .unwrap();
    assert!(matches!(r, Value::Bulk(Some(_))), "{r:?}");
    // The server answers another tenant, its functions included, and a as well.
    for (t, pw) in [("b", B_PW), ("a", A_PW)] {
        let mut s = RedisStore::open(&url(&srv, &f, t, pw, Some(t))).unwrap();
        let mut ops = Ops::new();
        let c = ops.compare_and_set_raw(k(b"x"), None, Some(b"1"));
        let p = ops.pool_init(k(b"p"), 8);
        let take = ops.pool_take(k(b"p"), 3);
        s.execute(&mut ops).unwrap();
        assert!(ops.swapped(c) && ops.swapped(p), "{t}");
        assert_eq!(ops.taken(take).collect::<Vec<_>>(), [0, 1, 2], "{t}");
    }
}

/// The backend's own functions bound the work a call may ask for: a tenant
/// calling them with arguments of its choosing (`FCALL` directly) cannot
/// make them loop for long.
#[test]
fn the_backends_functions_bound_what_a_caller_may_ask() {
    use sluice_state_redis::scripts::{MAX_EXPIRED, MAX_TAKE, POOL_INIT, POOL_TAKE, TAKE_EXPIRED};
    let (srv, f) = secured("bounds");
    let mut a = Admin::open(&url(&srv, &f, "a", A_PW, Some("a"))).unwrap();
    let (meta, freed, set) = ("t.a.{p}", "t.a.{p}:f", "t.a.{p}:s");
    let init = a
        .command(
            0,
            &[
                b"FCALL",
                POOL_INIT.as_bytes(),
                b"1",
                meta.as_bytes(),
                b"1000000000000000",
            ],
        )
        .unwrap();
    assert_eq!(init, Value::Int(1));
    // Twice the bound: unbounded, it would hand out all of them.
    let take_n = (2 * MAX_TAKE).to_string();
    let take = a
        .command(
            0,
            &[
                b"FCALL",
                POOL_TAKE.as_bytes(),
                b"3",
                meta.as_bytes(),
                freed.as_bytes(),
                set.as_bytes(),
                take_n.as_bytes(),
            ],
        )
        .unwrap();
    let Value::Array(Some(items)) = &take else {
        panic!("{take:?}")
    };
    assert_eq!(items.len(), MAX_TAKE as usize);
    let timers = "t.a.{t}:timers";
    for i in 0..(MAX_EXPIRED + 5) {
        let m = format!("m{i}");
        let r = a
            .command(0, &[b"ZADD", timers.as_bytes(), b"1", m.as_bytes()])
            .unwrap();
        assert_eq!(r, Value::Int(1));
    }
    let taken = a
        .command(
            0,
            &[
                b"FCALL",
                TAKE_EXPIRED.as_bytes(),
                b"1",
                timers.as_bytes(),
                b"10",
                b"99999999",
            ],
        )
        .unwrap();
    let Value::Array(Some(items)) = &taken else {
        panic!("{taken:?}")
    };
    assert_eq!(items.len(), MAX_EXPIRED);
}

/// A server without the library (flushed, or restarted empty) makes a
/// tenant's operations fail with an error that names the library and who
/// loads it; once the admin has loaded it again, the same store object works,
/// without reconnecting by hand.
#[test]
fn a_missing_library_is_a_clear_error_until_the_admin_loads_it() {
    let (mut srv, f) = secured("missing");
    let mut a = RedisStore::open(&url(&srv, &f, "a", A_PW, Some("a"))).unwrap();
    let cas = |a: &mut RedisStore, v: &[u8]| {
        let mut ops = Ops::new();
        let c = ops.compare_and_set_raw(k(b"c"), None, Some(v));
        let mut out = Vec::new();
        a.execute(&mut ops)?;
        a.take_expired(Namespace(9), 1, 10, &mut out)?;
        Ok::<_, StoreError>(ops.swapped(c))
    };
    assert!(cas(&mut a, b"1").unwrap());
    let mut admin = admin_of(&srv, &f);
    let r = admin.command(0, &[b"FUNCTION", b"FLUSH"]).unwrap();
    assert_eq!(r, Value::Simple("OK".into()));
    let missing = |e: StoreError| {
        let e = e.to_string();
        assert!(
            e.contains(&format!("has no function library {LIBRARY_NAME}"))
                && e.contains("is the controller's store sync running?"),
            "{e}"
        );
    };
    // Again and again, until it is back: an error each time, never a panic.
    for _ in 0..2 {
        missing(cas(&mut a, b"2").unwrap_err());
    }
    let mut out = Vec::new();
    missing(a.take_expired(Namespace(9), 1, 10, &mut out).unwrap_err());
    // Other code under the library's name (a stale or forged load) is
    // replaced, not kept.
    let stale = format!(
        "#!lua name={LIBRARY_NAME}\nredis.register_function('{LIBRARY_NAME}_cas', function() return 1 end)"
    );
    let r = admin
        .command(0, &[b"FUNCTION", b"LOAD", stale.as_bytes()])
        .unwrap();
    assert_eq!(r, Value::Bulk(Some(LIBRARY_NAME.as_bytes().to_vec())));
    assert_eq!(admin.load_library().unwrap(), 1);
    assert_eq!(admin.load_library().unwrap(), 0);
    assert!(!cas(&mut a, b"2").unwrap(), "c was set before the flush");

    // Restarted empty: no users, no library, no keys. The controller's sync
    // defines the users and loads the library again; here the users first,
    // to see the library's absence from a tenant's side.
    srv.restart().unwrap();
    assert!(cas(&mut a, b"3").is_err(), "the connection was lost");
    let mut admin = admin_of(&srv, &f);
    admin.set_tenant_user("a", &Secret::new(A_PW)).unwrap();
    missing(cas(&mut a, b"3").unwrap_err());
    assert_eq!(admin.load_library().unwrap(), 1);
    assert!(cas(&mut a, b"3").unwrap(), "an empty server");
}

/// The library reaches replicas by replication (the admin loads it on
/// primaries; a replica refuses a load), so a replica that takes over from a
/// dead primary serves a tenant's functions without the admin's help.
#[test]
fn replicas_get_the_library_and_serve_it_after_a_failover() {
    use sluice_state_redis::server::RedisCluster;
    use sluice_state_redis::ClusterStore;
    let mut cluster = RedisCluster::start_replicated(3, 1, 1000).expect("start 3+3 nodes");
    let f = Files::new("replicas");
    let mut admin = Admin::open(&cluster.url()).unwrap();
    admin.set_tenant_user("a", &Secret::new(A_PW)).unwrap();
    assert_eq!(
        admin.load_library().unwrap(),
        3,
        "the primaries; replicas refuse"
    );
    let replicas: Vec<usize> = (3..6).collect();
    let list: [&[u8]; 5] = [
        b"FUNCTION",
        b"LIST",
        b"LIBRARYNAME",
        LIBRARY_NAME.as_bytes(),
        b"WITHCODE",
    ];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    for &r in &replicas {
        // Replication is asynchronous: a safety net, not a timing assertion.
        while !format!("{:?}", admin.command(r, &list).unwrap())
            .contains(&format!("{:?}", LIBRARY.as_bytes()))
        {
            assert!(
                std::time::Instant::now() < deadline,
                "replica {r} never got it"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let load = admin
            .command(r, &[b"FUNCTION", b"LOAD", b"REPLACE", LIBRARY.as_bytes()])
            .unwrap();
        assert!(
            matches!(&load, Value::Error(e) if e.starts_with("READONLY")),
            "{load:?}"
        );
    }
    let hosts = cluster
        .url()
        .trim_start_matches("redis-cluster://")
        .to_string();
    let url = format!(
        "redis-cluster://{}@{hosts}?prefix={}&password_file={}",
        tenant_user("a"),
        tenant_prefix("a"),
        f.password("a", A_PW)
    );
    let mut a = ClusterStore::open(&url).unwrap();
    let pools = |a: &mut ClusterStore, size: u64| {
        let mut ops = Ops::new();
        let ids: Vec<_> = (0..32u8)
            .map(|i| ops.pool_init(k(&[b'p', i]), size))
            .collect();
        a.execute(&mut ops)
            .map(|()| ids.iter().filter(|&&i| ops.swapped(i)).count())
    };
    assert_eq!(pools(&mut a, 4).unwrap(), 32, "pools on every primary");
    cluster.nodes[0].kill();
    cluster.await_failover(0).expect("a replica takes over");
    // The batch that meets the dead primary may fail; the promoted replica
    // then answers every function call (existing pools: not swapped).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        match pools(&mut a, 4) {
            Ok(n) => {
                assert_eq!(n, 0);
                break;
            }
            Err(e) => {
                assert!(!e.to_string().contains("function library"), "{e}");
                assert!(std::time::Instant::now() < deadline, "{e}");
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
    }
}
