//! Delta pushes between the real controller and real agents (issue 25): the
//! first push to an agent is its whole configuration, later ones are deltas
//! against the version it acknowledged, and what the agent ends up running is
//! the controller's whole configuration; a restarted agent gets a whole one
//! again, and an agent running another version than its delta's base refuses it
//! (409) and gets the whole configuration at once. No namespaces needed (VM
//! interfaces that do not exist are fine).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::time::{Duration, Instant};

use sluice_agent::{Agent, AgentOptions};
use sluice_controller::client::Client;
use sluice_controller::{serve, ServerHandle, ServerOptions};
use sluice_proto::VmRegistration;

fn controller(dir: &Path) -> (ServerHandle, Client, String) {
    let db = dir.join("c.db");
    let h = serve(ServerOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        db: db.clone(),
        state_url: "local".into(),
        admin_token_file: None,
        // Keys per peer: the part of a configuration that grows with peers.
        fabric_auth: true,
        tls: None,
        placement: Default::default(),
        distribution: Default::default(),
        containment_threshold: sluice_controller::reconcile::DEFAULT_THRESHOLD,
        require_agent_tls: false,
        etcd: None,
    })
    .unwrap();
    let secret = std::fs::read_to_string(sluice_controller::service::default_admin_token_file(&db))
        .unwrap()
        .trim()
        .to_string();
    let c = Client::new(&h.url()).with_token(Some(&secret));
    (h, c, secret)
}

fn agent_opts(host: u32, ctl: &ServerHandle, token: &str, api_token: &str) -> AgentOptions {
    AgentOptions {
        host,
        name: format!("h{host}"),
        netns: None,
        underlay: Ipv4Addr::new(10, 255, 0, host as u8),
        controller: Some(ctl.url()),
        controller_token: Some(token.into()),
        controller_tls: None,
        api_token: Some(api_token.into()),
        listen: "127.0.0.1:0".into(),
        prefix: "t".into(),
        run_dir: None,
        udp: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0),
        instance_exe: None,
        suspect_after: None,
        seawall: None,
        vm_mtu: None,
        capacity: None,
        api_tls: false,
        siem: None,
        dataplane_threads: 1,
    }
}

fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(20);
    while !ok() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The controller's push counters: (full, delta, deltas refused).
fn pushes(c: &Client) -> (u64, u64, u64) {
    let m = c.get_raw("/metrics").unwrap();
    let v = |name: &str| -> u64 {
        m.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {m}"))
    };
    (
        v("sluice_controller_pushes_by_kind_total{kind=\"full\"}"),
        v("sluice_controller_pushes_by_kind_total{kind=\"delta\"}"),
        v("sluice_controller_push_deltas_refused_total"),
    )
}

/// The push counters once no push is in flight (an agent runs a new
/// version a moment before the controller counts its answer).
fn settled(c: &Client) -> (u64, u64, u64) {
    let mut last = pushes(c);
    loop {
        std::thread::sleep(Duration::from_millis(150));
        let now = pushes(c);
        if now == last {
            return now;
        }
        last = now;
    }
}

/// Every agent runs the version the controller wants, and exactly the
/// configuration the controller holds for it (secrets aside: the
/// controller shows them redacted).
fn in_sync(c: &Client, agents: &[&Agent]) -> bool {
    let hosts = c.hosts().unwrap();
    agents.iter().all(|a| {
        let core = a.core();
        let Some(h) = hosts
            .iter()
            .find(|h| Some(h.id) == core.config().map(|c| c.host))
        else {
            return false;
        };
        core.version() == h.desired_version
    })
}

fn same_config(c: &Client, a: &Agent, host: u32) {
    let running = a.core().config().unwrap();
    let want = c.config(host).unwrap();
    assert_eq!(running.version, want.version);
    assert_eq!(running.redacted(), want.redacted(), "host {host}");
    // The keys themselves, checked by their owners: every peer's keys are
    // there (the controller shows them redacted).
    let keys = running.fabric_auth.as_ref().unwrap();
    assert!(keys.peers.iter().all(|p| p.tx.key.len() == 64));
}

fn vm(tenant: &str, name: &str, host: u32, addr: &str) -> VmRegistration {
    VmRegistration {
        tenant: tenant.into(),
        name: name.into(),
        host,
        iface: format!("v-{tenant}-{name}"),
        mac: "02:00:00:00:00:07".into(),
        addr: addr.parse().unwrap(),
        gateway: false,
    }
}

fn spec(tenant: &str) -> String {
    format!(
        "tenant: {tenant}
elements:
  web: {{ type: service, vms: {{ w1: 10.0.1.1, w2: 10.0.1.2 }} }}
  db: {{ type: service, vms: {{ d1: 10.0.2.1 }} }}
  fw:
    type: middlebox
    function: firewall
    config: {{ rules: \"allow tcp from any to 10.0.2.1 port 5432\\ndefault deny\" }}
chains:
  - {{ name: app, path: [web, fw, db] }}
"
    )
}

#[test]
fn later_pushes_are_deltas_and_a_restarted_agent_gets_a_whole_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let (ctl, c, token) = controller(dir.path());
    let a1 = Agent::start(&agent_opts(1, &ctl, &token, "secret-1")).unwrap();
    let a2 = Agent::start(&agent_opts(2, &ctl, &token, "secret-2")).unwrap();
    let a3 = Agent::start(&agent_opts(3, &ctl, &token, "secret-3")).unwrap();
    wait_until("three hosts in sync", || {
        c.hosts().unwrap().len() == 3 && in_sync(&c, &[&a1, &a2, &a3])
    });
    let (full0, delta0, refused0) = settled(&c);
    assert!(full0 >= 3, "first contact is whole: {full0}");

    // A tenant over the three hosts: every host's configuration changes.
    for (n, h, addr) in [
        ("w1", 1, "10.0.1.1"),
        ("w2", 2, "10.0.1.2"),
        ("d1", 3, "10.0.2.1"),
    ] {
        c.register_vm(&vm("acme", n, h, addr)).unwrap();
    }
    c.apply(None, &spec("acme")).unwrap();
    wait_until("the tenant everywhere", || {
        in_sync(&c, &[&a1, &a2, &a3]) && a1.core().config().is_some_and(|c| !c.tenants.is_empty())
    });
    // Deltas, or whole configurations where a delta would not be smaller
    // (hosts that had next to nothing): never a refused delta.
    let (full1, delta1, refused1) = settled(&c);
    assert!(
        full1 + delta1 >= full0 + delta0 + 3,
        "{full0}+{delta0} -> {full1}+{delta1}"
    );
    assert_eq!(refused1, refused0);
    for (h, a) in [(1, &a1), (2, &a2), (3, &a3)] {
        same_config(&c, a, h);
    }
    // A second tenant's VMs on the same hosts: deltas only.
    for (n, h, addr) in [
        ("w1", 2, "10.0.1.1"),
        ("w2", 3, "10.0.1.2"),
        ("d1", 1, "10.0.2.1"),
    ] {
        c.register_vm(&vm("gamma", n, h, addr)).unwrap();
    }
    c.apply(None, &spec("gamma")).unwrap();
    wait_until("the second tenant everywhere", || {
        in_sync(&c, &[&a1, &a2, &a3]) && a1.core().config().is_some_and(|c| c.tenants.len() == 2)
    });
    let (full, delta, refused) = settled(&c);
    assert_eq!((full, refused), (full1, refused1), "deltas only");
    assert!(delta >= delta1 + 3, "deltas {delta1} -> {delta}");
    for (h, a) in [(1, &a1), (2, &a2), (3, &a3)] {
        same_config(&c, a, h);
    }
    let (full1, delta1, refused1) = (full, delta, refused);

    // Host 1's agent restarts, without a saved configuration and with a new
    // API token (as `sluiced` draws one at each start): a whole
    // configuration, no refused delta first.
    a1.shutdown();
    let a1 = Agent::start(&agent_opts(1, &ctl, &token, "secret-1-again")).unwrap();
    wait_until("the restarted agent in sync", || {
        a1.core().version() > 0 && in_sync(&c, &[&a1, &a2, &a3])
    });
    let (full2, _, refused2) = settled(&c);
    assert_eq!(full2, full1 + 1);
    assert_eq!(refused2, refused1);
    same_config(&c, &a1, 1);

    // Another tenant: deltas again, the restarted agent's included.
    let _ = delta1;
    for (n, h, addr) in [
        ("w1", 1, "10.0.1.1"),
        ("w2", 3, "10.0.1.2"),
        ("d1", 2, "10.0.2.1"),
    ] {
        c.register_vm(&vm("beta", n, h, addr)).unwrap();
    }
    c.apply(None, &spec("beta")).unwrap();
    wait_until("the third tenant everywhere", || {
        in_sync(&c, &[&a1, &a2, &a3]) && a1.core().config().is_some_and(|c| c.tenants.len() == 3)
    });
    let (full3, delta3, refused3) = settled(&c);
    assert_eq!((full3, refused3), (full2, refused2));
    assert!(delta3 >= delta1 + 3);
    for (h, a) in [(1, &a1), (2, &a2), (3, &a3)] {
        same_config(&c, a, h);
    }

    // Host 2's agent runs another version than it acknowledged (here: put
    // there behind the controller's back, ahead of it): the controller moves
    // past it, its delta is refused (409), the whole configuration follows.
    let mut ahead = a2.core().config().unwrap();
    ahead.version += 5;
    let r = ureq::put(&format!("{}/v1/config", a2.api_url()))
        .set("Authorization", "Bearer secret-2")
        .send_json(&ahead)
        .unwrap();
    assert_eq!(r.status(), 200);
    wait_until("host 2 past the version it was given", || {
        a2.core().version() > ahead.version && in_sync(&c, &[&a1, &a2, &a3])
    });
    let (full4, _, refused4) = settled(&c);
    assert_eq!((full4, refused4), (full3 + 1, refused3 + 1));
    same_config(&c, &a2, 2);
    a1.shutdown();
    a2.shutdown();
    a3.shutdown();
    ctl.shutdown();
}
