//! Store isolation run by the controller against a real redis-server with
//! authentication on: applying a tenant creates its ACL user, its instances are
//! pushed their tenant's URL and password (which never reach the database), the
//! password works only for that tenant's keys, and deleting the tenant deletes
//! the user. The controller also loads the backend's function library, which
//! tenant users may not load, and loads it again when the store loses it.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sluice_controller::client::Client;
use sluice_controller::store_acl::tenant_password;
use sluice_controller::{serve, ServerOptions};
use sluice_proto::{AgentConfig, HostRegistration, VmRegistration};
use sluice_state::{Key, Namespace, Ops, StateStore};
use sluice_state_redis::acl::{tenant_user, Admin, Value};
use sluice_state_redis::scripts::LIBRARY_NAME;
use sluice_state_redis::server::RedisServer;
use sluice_state_redis::{RedisStore, Secret};

const ADMIN_PW: &str = "controller-admin-pw-3b7e";

/// An agent that accepts and records every whole configuration.
struct FakeAgent {
    url: String,
    configs: Arc<Mutex<Vec<AgentConfig>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FakeAgent {
    fn start() -> FakeAgent {
        let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
        let url = format!("http://{}", server.server_addr().to_ip().unwrap());
        let configs: Arc<Mutex<Vec<AgentConfig>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s) = (configs.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let Ok(Some(mut req)) = server.recv_timeout(Duration::from_millis(50)) else {
                    continue;
                };
                let mut body = String::new();
                let _ = req.as_reader().read_to_string(&mut body);
                // Whole configurations only: a delta (PATCH) is refused as
                // by an agent that predates them, so the controller sends
                // the whole configuration, which is what this test reads.
                if req.method() != &tiny_http::Method::Put {
                    let _ = req.respond(tiny_http::Response::empty(405));
                    continue;
                }
                if let Ok(cfg) = serde_json::from_str::<AgentConfig>(&body) {
                    c.lock().unwrap().push(cfg);
                }
                let _ = req.respond(tiny_http::Response::from_string("{}"));
            }
        });
        FakeAgent {
            url,
            configs,
            stop,
            thread: Some(thread),
        }
    }

    fn last(&self) -> Option<AgentConfig> {
        self.configs.lock().unwrap().last().cloned()
    }
}

impl Drop for FakeAgent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Polls `f` until it holds (a safety net, not a timing assertion).
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn figure4(tenant: &str) -> String {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/tenant/figure4.yaml"
    ))
    .unwrap();
    text.replace("tenant: acme", &format!("tenant: {tenant}"))
}

fn k() -> Key {
    Key::new(Namespace(1), 1, b"flow")
}

#[test]
fn tenants_get_store_users_that_reach_only_their_own_keys() {
    let dir = tempfile::tempdir().unwrap();
    let mut redis = RedisServer::start(&[]).expect("start redis-server");
    redis.secure("admin", &Secret::new(ADMIN_PW)).unwrap();
    let admin_file = dir.path().join("admin.pw");
    std::fs::write(&admin_file, format!("{ADMIN_PW}\n")).unwrap();
    let admin_url = format!(
        "redis://admin@127.0.0.1:{}?password_file={}",
        redis.port(),
        admin_file.display()
    );
    let db = dir.path().join("controller.db");
    let server = serve(ServerOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        db: db.clone(),
        state_url: admin_url.clone(),
        admin_token_file: Some(dir.path().join("admin.token")),
        fabric_auth: true,
        tls: None,
        placement: Default::default(),
        distribution: Default::default(),
        containment_threshold: sluice_controller::reconcile::DEFAULT_THRESHOLD,
        require_agent_tls: false,
        etcd: None,
    })
    .unwrap();
    let token = std::fs::read_to_string(dir.path().join("admin.token")).unwrap();
    let c = Client::new(&server.url()).with_token(Some(&token));
    let agent = FakeAgent::start();
    c.register_host(&HostRegistration {
        host: 1,
        name: "h1".into(),
        underlay: Ipv4Addr::new(10, 255, 0, 1),
        api: agent.url.clone(),
        config_version: 0,
        api_token: None,
        capacity: None,
        api_csr: None,
    })
    .unwrap();
    for tenant in ["acme", "beta"] {
        for (name, addr, gateway) in [
            ("gateway", "198.51.100.10", true),
            ("web-a1", "10.10.1.11", false),
            ("web-a2", "10.10.1.12", false),
            ("web-b1", "10.10.2.11", false),
            ("web-b2", "10.10.2.12", false),
        ] {
            c.register_vm(&VmRegistration {
                tenant: tenant.into(),
                name: name.into(),
                host: 1,
                iface: format!("v-{tenant}-{name}"),
                mac: "02:00:00:00:00:07".into(),
                addr: addr.parse().unwrap(),
                gateway,
            })
            .unwrap();
        }
        c.apply(Some(tenant), &figure4(tenant)).unwrap();
    }
    let mut admin = Admin::open(&admin_url).unwrap();
    eventually("both tenants' users exist", || {
        admin.tenant_users().unwrap() == [tenant_user("acme"), tenant_user("beta")]
    });

    // The pushed instances carry their tenant's URL and derived password.
    let mut urls = std::collections::BTreeMap::new();
    eventually("instances of both tenants pushed", || {
        let Some(cfg) = agent.last() else {
            return false;
        };
        for i in cfg.instances.iter().filter(|i| i.state != "local") {
            let pw = i.state_password.as_ref().expect("a password");
            let want = tenant_password(&Secret::new(ADMIN_PW), &i.tenant);
            assert_eq!(pw.expose(), want.expose(), "{}", i.name);
            assert_eq!(
                i.state,
                format!(
                    "redis://sluice-t-{}@127.0.0.1:{}?prefix=t.{}.",
                    i.tenant,
                    redis.port(),
                    i.tenant
                )
            );
            urls.insert(i.tenant.clone(), (i.state.clone(), pw.expose().to_string()));
        }
        urls.len() == 2
    });
    let open = |tenant: &str, other_prefix: Option<&str>| {
        let (url, pw) = &urls[tenant];
        let f = dir.path().join(format!("{tenant}.pw"));
        std::fs::write(&f, pw).unwrap();
        let url = match other_prefix {
            Some(p) => url.replace(&format!("prefix=t.{tenant}."), &format!("prefix=t.{p}.")),
            None => url.clone(),
        };
        RedisStore::open(&format!("{url}&password_file={}", f.display()))
    };
    let mut acme = open("acme", None).unwrap();
    let mut ops = Ops::new();
    ops.put(k(), b"acme's");
    acme.execute(&mut ops).unwrap();
    // Compare-and-set is a function of the library: the controller loaded it.
    let mut cas = |v: &[u8]| {
        let mut ops = Ops::new();
        let pool = Key::new(Namespace(1), 2, b"pool");
        ops.compare_and_set_raw(k(), Some(b"acme's"), Some(v));
        ops.compare_and_set_raw(k(), Some(v), Some(b"acme's"));
        let p = ops.pool_init(pool, 4);
        acme.execute(&mut ops).map(|()| ops.swapped(p))
    };
    assert!(cas(b"x").unwrap());
    // A store that loses it (flushed here; restarted empty alike) gets it
    // back from the controller's periodic sync, and the tenant's connection
    // works again by itself.
    let r = admin.command(0, &[b"FUNCTION", b"FLUSH"]).unwrap();
    assert_eq!(r, Value::Simple("OK".into()));
    let e = cas(b"y").unwrap_err().to_string();
    assert!(
        e.contains(&format!("no function library {LIBRARY_NAME}")),
        "{e}"
    );
    eventually("the controller loads the library again", || {
        cas(b"z").is_ok()
    });
    // beta's user, aiming at acme's keys, is refused.
    let mut beta_as_acme = open("beta", Some("acme")).unwrap();
    let mut read = Ops::new();
    read.get(k());
    let e = beta_as_acme.execute(&mut read).unwrap_err().to_string();
    assert!(e.contains("NOPERM") && e.contains("sluice-t-beta"), "{e}");

    // Nothing secret is stored: not the tenants' passwords, not the admin's.
    server.shutdown();
    let stored = std::fs::read(&db).unwrap();
    for (_, pw) in urls.values() {
        assert!(!stored.windows(pw.len()).any(|w| w == pw.as_bytes()));
    }
    assert!(!stored
        .windows(ADMIN_PW.len())
        .any(|w| w == ADMIN_PW.as_bytes()));

    // Restarted on its database, the controller deletes a removed tenant's user;
    // its password stops working.
    let server = serve(ServerOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        db,
        state_url: admin_url,
        admin_token_file: Some(dir.path().join("admin.token")),
        fabric_auth: true,
        tls: None,
        placement: Default::default(),
        distribution: Default::default(),
        containment_threshold: sluice_controller::reconcile::DEFAULT_THRESHOLD,
        require_agent_tls: false,
        etcd: None,
    })
    .unwrap();
    let c = Client::new(&server.url()).with_token(Some(&token));
    c.delete_tenant("beta").unwrap();
    eventually("beta's user is gone", || {
        admin.tenant_users().unwrap() == [tenant_user("acme")]
    });
    let e = open("beta", None).err().expect("refused").to_string();
    assert!(e.contains("WRONGPASS"), "{e}");
    assert!(open("acme", None).is_ok());
}
