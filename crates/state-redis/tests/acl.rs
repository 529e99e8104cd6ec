//! Store isolation against a real redis-server with ACLs: a tenant's user works
//! for every operation the backend has (so a command missing from
//! `acl::TENANT_COMMANDS` fails here) and for nothing of another tenant's.

use std::path::PathBuf;

use sluice_state::{Key, LocalStore, Namespace, Ops, StateStore, StoreError};
use sluice_state_redis::acl::{tenant_prefix, tenant_user, Admin};
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
/// and `b`, and the files holding every password.
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
    (srv, files)
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
        // A script (EVALSHA) is refused the key as well.
        let mut cas = Ops::new();
        cas.compare_and_set_raw(k(b"flow"), Some(b"b's state"), Some(b"forged"));
        assert_noperm(a.execute(&mut cas), &user, &format!("{what}: EVALSHA"));
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
    // Answered by the live nodes.
    assert_eq!(admin.tenant_users().unwrap(), [tenant_user("a")]);
    for live in [0, 2] {
        let mut one = Admin::open(&format!("redis-cluster://{}", hosts[live])).unwrap();
        assert_eq!(one.tenant_users().unwrap(), [tenant_user("a")], "{live}");
    }
    servers[0].kill();
    servers[2].kill();
    assert!(admin.tenant_users().is_err(), "no node answered");
}
