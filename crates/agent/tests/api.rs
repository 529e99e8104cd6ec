//! The agent's control side without namespaces: configuration over HTTP
//! (accepted, refused whole), status, metrics, heartbeats to a controller and the
//! saved configuration on restart.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::mpsc;
use std::time::Duration;

use sluice_agent::testing::agent_status;
use sluice_agent::{Agent, AgentOptions};
use sluice_proto::{AgentConfig, HostRegistration, PortConfig, PortKind, TenantFib};
use sluice_switch::{Action, Entry, GroupId, Match};

mod promtool;

fn opts(controller: Option<String>, run_dir: Option<std::path::PathBuf>) -> AgentOptions {
    AgentOptions {
        host: 4,
        name: "h4".into(),
        netns: None,
        underlay: Ipv4Addr::new(10, 255, 0, 4),
        controller,
        controller_token: None,
        controller_tls: None,
        api_token: None,
        listen: "127.0.0.1:0".into(),
        prefix: "t".into(),
        run_dir,
        // Port 0: tests may run side by side in one namespace.
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

fn config(version: u64) -> AgentConfig {
    AgentConfig {
        pardons: Vec::new(),
        health_checks: Vec::new(),
        version,
        host: 4,
        peers: vec![],
        ports: vec![PortConfig {
            id: 3,
            vni: 9,
            kind: PortKind::Vm {
                name: "vm\"3".into(),
                iface: "sl-no-such-if".into(),
                mac: "02:00:00:00:00:03".into(),
                weight: 1,
            },
        }],
        tenants: vec![TenantFib {
            tenant: "t".into(),
            vni: 9,
            entries: vec![Entry {
                id: 1,
                priority: 1,
                m: Match::default(),
                actions: vec![Action::Drop],
            }],
            groups: vec![],
            senders: None,
            sources: None,
            chains: Vec::new(),
        }],
        instances: vec![],
        group_policies: vec![],
        fabric_auth: None,
    }
}

fn put(url: &str, body: &str) -> (u16, serde_json::Value) {
    let r = ureq::put(&format!("{url}/v1/config"))
        .set("Content-Type", "application/json")
        .send_string(body);
    let (code, resp) = match r {
        Ok(r) => (r.status(), r),
        Err(ureq::Error::Status(c, r)) => (c, r),
        Err(e) => panic!("{e}"),
    };
    (code, resp.into_json().unwrap())
}

#[test]
fn with_an_api_token_only_its_bearer_may_touch_the_configuration() {
    let mut o = opts(None, None);
    o.api_token = Some("agent-secret".into());
    let agent = Agent::start(&o).unwrap();
    let url = agent.api_url();
    let body = serde_json::to_string(&config(3)).unwrap();
    for auth in [
        None,
        Some("Bearer wrong"),
        Some("agent-secret"),
        Some("Basic agent-secret"),
    ] {
        let mut req =
            ureq::put(&format!("{url}/v1/config")).set("Content-Type", "application/json");
        if let Some(a) = auth {
            req = req.set("Authorization", a);
        }
        match req.send_string(&body) {
            Err(ureq::Error::Status(401, r)) => {
                let t = r.into_string().unwrap();
                assert!(t.contains("token"), "{t}");
            }
            other => panic!("{auth:?}: {other:?}"),
        }
        assert!(matches!(
            ureq::get(&format!("{url}/v1/config")).call(),
            Err(ureq::Error::Status(401, _))
        ));
    }
    assert_eq!(
        agent_status(&url).config_version,
        0,
        "a refused push changed nothing"
    );
    let r = ureq::put(&format!("{url}/v1/config"))
        .set("Authorization", "Bearer agent-secret")
        .set("Content-Type", "application/json")
        .send_string(&body)
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(agent_status(&url).config_version, 3);
    // Status and metrics stay open for monitoring.
    assert!(ureq::get(&format!("{url}/metrics")).call().is_ok());
    agent.shutdown();
}

#[test]
fn configs_are_accepted_or_refused_whole() {
    // With a SIEM sink, so that its metric families are linted too.
    let run = tempfile::tempdir().unwrap();
    let mut o = opts(None, Some(run.path().to_path_buf()));
    o.siem = Some(sluice_agent::siem::SiemConfig {
        redis: None,
        syslog: Some(sluice_agent::siem::SyslogSink::parse("udp://127.0.0.1:9").unwrap()),
        queue: 10,
    });
    let agent = Agent::start(&o).unwrap();
    let url = agent.api_url();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    assert_eq!(agent_status(&url).config_version, 0);

    let (code, body) = put(&url, &serde_json::to_string(&config(3)).unwrap());
    assert_eq!((code, body["version"].as_u64()), (200, Some(3)));
    let s = agent_status(&url);
    assert_eq!((s.host, s.config_version), (4, 3));
    assert_eq!(s.ports.len(), 1);
    assert_eq!(s.ports[0].name, "vm\"3");

    // Selecting a group that does not exist: refused, version 3 stays.
    let mut bad = config(4);
    bad.tenants[0].entries[0].actions = vec![Action::Select(GroupId(8))];
    let (code, body) = put(&url, &serde_json::to_string(&bad).unwrap());
    assert_eq!(code, 400);
    assert!(
        body["error"].as_str().unwrap().contains("group 8"),
        "{body}"
    );
    let mut wrong_host = config(5);
    wrong_host.host = 5;
    let (code, _) = put(&url, &serde_json::to_string(&wrong_host).unwrap());
    assert_eq!(code, 400);
    let (code, body) = put(&url, "{not json");
    assert_eq!(code, 400);
    assert!(body["error"].as_str().unwrap().contains("JSON"), "{body}");
    assert_eq!(agent_status(&url).config_version, 3);

    let m = ureq::get(&format!("{url}/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    assert!(
        m.contains("sluice_agent_config_version{host=\"4\"} 3"),
        "{m}"
    );
    assert!(
        m.contains("sluice_port_up{host=\"4\",port=\"3\",name=\"vm\\\"3\"} 0"),
        "the interface does not exist: {m}"
    );
    assert!(m.contains("sluice_agent_drops_total{host=\"4\",reason=\"no_match\"} 0"));
    assert!(m.contains("sluice_siem_up{host=\"4\",sink=\"syslog-udp\"} 1"));
    promtool::assert_lints_clean(&m);
    let r = ureq::get(&format!("{url}/v1/nothing")).call();
    assert!(matches!(r, Err(ureq::Error::Status(404, _))));
    let r = ureq::delete(&format!("{url}/v1/config")).call();
    assert!(matches!(r, Err(ureq::Error::Status(405, _))));
    agent.shutdown();
}

fn patch(url: &str, token: Option<&str>, body: &str) -> (u16, serde_json::Value) {
    let mut r =
        ureq::request("PATCH", &format!("{url}/v1/config")).set("Content-Type", "application/json");
    if let Some(t) = token {
        r = r.set("Authorization", &format!("Bearer {t}"));
    }
    let (code, resp) = match r.send_string(body) {
        Ok(r) => (r.status(), r),
        Err(ureq::Error::Status(c, r)) => (c, r),
        Err(e) => panic!("{e}"),
    };
    (code, resp.into_json().unwrap())
}

/// `PATCH /v1/config`: a delta against the running version is applied and
/// installed as the whole configuration would be (and saved: a restarted
/// agent runs it); one against another version is 409 naming both; a bad
/// one is 400; neither changes anything. Same token as `PUT`.
#[test]
fn deltas_apply_to_the_running_version_only() {
    let run = tempfile::tempdir().unwrap();
    let mut o = opts(None, Some(run.path().to_path_buf()));
    o.api_token = Some("agent-secret".into());
    let agent = Agent::start(&o).unwrap();
    let url = agent.api_url();
    let tok = Some("agent-secret");
    let v3 = config(3);
    let mut v4 = config(4);
    v4.ports.push(PortConfig {
        id: 7,
        vni: 9,
        kind: PortKind::Vm {
            name: "vm7".into(),
            iface: "sl-no-such-7".into(),
            mac: "02:00:00:00:00:07".into(),
            weight: 2,
        },
    });
    v4.tenants[0].entries[0].priority = 5;
    v4.pardons = vec![sluice_proto::Pardon {
        host: 2,
        generation: 1,
    }];
    let d34 = serde_json::to_string(&AgentConfig::delta_from(&v3, &v4)).unwrap();
    // Nothing runs yet: a delta has no base here.
    let (code, body) = patch(&url, tok, &d34);
    assert_eq!(code, 409, "{body}");
    assert_eq!(
        (body["running"].as_u64(), body["base"].as_u64()),
        (Some(0), Some(3))
    );
    // The agent's token is needed, as for PUT.
    let (code, _) = patch(&url, None, &d34);
    assert_eq!(code, 401);
    let r = ureq::put(&format!("{url}/v1/config"))
        .set("Authorization", "Bearer agent-secret")
        .send_json(&v3)
        .unwrap();
    assert_eq!(r.status(), 200);
    let (code, body) = patch(&url, tok, &d34);
    assert_eq!((code, body["version"].as_u64()), (200, Some(4)), "{body}");
    let shown = |url: &str| -> AgentConfig {
        ureq::get(&format!("{url}/v1/config"))
            .set("Authorization", "Bearer agent-secret")
            .call()
            .unwrap()
            .into_json()
            .unwrap()
    };
    assert_eq!(
        shown(&url),
        v4,
        "the delta's result is the whole new configuration"
    );
    let s = agent_status(&url);
    assert_eq!((s.config_version, s.ports.len()), (4, 2));
    // Again: version 4 runs now, the delta is stale.
    let (code, body) = patch(&url, tok, &d34);
    assert_eq!(code, 409);
    let e = body["error"].as_str().unwrap();
    assert!(e.contains("version 3") && e.contains("version 4"), "{e}");
    assert_eq!(
        (body["running"].as_u64(), body["base"].as_u64()),
        (Some(4), Some(3))
    );
    // Bad deltas: JSON, a removal of what is not there, a result the data
    // plane refuses (a group that does not exist). Nothing changes.
    let (code, body) = patch(&url, tok, "{not json");
    assert_eq!(code, 400);
    assert!(
        body["error"].as_str().unwrap().contains("delta JSON"),
        "{body}"
    );
    let mut gone = AgentConfig::delta_from(&v4, &config(5));
    gone.ports.remove.push(99);
    let (code, body) = patch(&url, tok, &serde_json::to_string(&gone).unwrap());
    assert_eq!(code, 400);
    assert!(
        body["error"].as_str().unwrap().contains("cannot remove 99"),
        "{body}"
    );
    let mut bad = config(5);
    bad.tenants[0].entries[0].actions = vec![Action::Select(GroupId(8))];
    let (code, body) = patch(
        &url,
        tok,
        &serde_json::to_string(&AgentConfig::delta_from(&v4, &bad)).unwrap(),
    );
    assert_eq!(code, 400);
    assert!(
        body["error"].as_str().unwrap().contains("group 8"),
        "{body}"
    );
    assert_eq!(shown(&url), v4, "nothing changed");
    agent.shutdown();
    // Saved as a PUT would be: the restarted agent runs version 4.
    let agent = Agent::start(&o).unwrap();
    assert_eq!(shown(&agent.api_url()), v4);
    agent.shutdown();
}

#[test]
fn the_agent_heartbeats_at_the_interval_it_is_told_and_at_once_on_a_new_configuration() {
    // A controller that tells `told` (0: no field, as controllers before it).
    let controller = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let curl = format!("http://{}", controller.server_addr().to_ip().unwrap());
    let told = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(400));
    let (tx, rx) = mpsc::channel::<(std::time::Instant, u64)>();
    let server = std::sync::Arc::new(controller);
    let (s, t) = (server.clone(), told.clone());
    std::thread::spawn(move || {
        for mut req in s.incoming_requests() {
            let mut body = String::new();
            let _ = std::io::Read::read_to_string(req.as_reader(), &mut body);
            if let Ok(r) = serde_json::from_str::<HostRegistration>(&body) {
                let _ = tx.send((std::time::Instant::now(), r.config_version));
            }
            let ms = t.load(std::sync::atomic::Ordering::Relaxed);
            let answer = if ms == 0 {
                serde_json::json!({"host": 4, "desired_version": 0})
            } else {
                serde_json::json!({"host": 4, "desired_version": 0, "heartbeat_ms": ms})
            };
            let _ = req.respond(tiny_http::Response::from_string(answer.to_string()));
        }
    });
    let agent = Agent::start(&opts(Some(curl), None)).unwrap();
    let count = |rx: &mpsc::Receiver<(std::time::Instant, u64)>, d: Duration| {
        let end = std::time::Instant::now() + d;
        let mut n = 0;
        while rx
            .recv_timeout(end.saturating_duration_since(std::time::Instant::now()))
            .is_ok()
        {
            n += 1;
        }
        n
    };
    rx.recv_timeout(Duration::from_secs(10)).unwrap();
    // Told 400 ms: 5 heartbeats in 2 s (40 at the old 50 ms).
    let n = count(&rx, Duration::from_secs(2));
    assert!((4..=7).contains(&n), "{n} heartbeats in 2 s at 400 ms");
    // A new configuration is news: heartbeat within ~50 ms, not 2 s.
    told.store(2000, std::sync::atomic::Ordering::Relaxed);
    count(&rx, Duration::from_millis(500));
    let (code, _) = put(
        &agent.api_url(),
        &serde_json::to_string(&config(7)).unwrap(),
    );
    assert_eq!(code, 200);
    let applied = std::time::Instant::now();
    let (at, v) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(v, 7);
    assert!(
        at.duration_since(applied) < Duration::from_millis(500),
        "reported after {:?}",
        at.duration_since(applied)
    );
    // An answer without the field (an older controller): 50 ms again, after
    // the 2 s interval told before runs out.
    told.store(0, std::sync::atomic::Ordering::Relaxed);
    count(&rx, Duration::from_millis(2500));
    let n = count(&rx, Duration::from_secs(1));
    assert!(n >= 12, "{n} heartbeats in 1 s at 50 ms");
    agent.shutdown();
}

#[test]
fn heartbeats_carry_the_running_version_and_configs_survive_restarts() {
    let controller = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let curl = format!("http://{}", controller.server_addr().to_ip().unwrap());
    let (tx, rx) = mpsc::channel::<(HostRegistration, Option<String>)>();
    let server = std::sync::Arc::new(controller);
    let s = server.clone();
    let t = std::thread::spawn(move || {
        for mut req in s.incoming_requests() {
            let mut body = String::new();
            let _ = std::io::Read::read_to_string(req.as_reader(), &mut body);
            let auth = req
                .headers()
                .iter()
                .find(|h| h.field.equiv("Authorization"))
                .map(|h| h.value.to_string());
            if req.url() == "/v1/hosts" {
                if let Ok(r) = serde_json::from_str(&body) {
                    let _ = tx.send((r, auth));
                }
            }
            let _ = req.respond(tiny_http::Response::from_string("{}"));
        }
    });
    let dir = std::env::temp_dir().join(format!("sluice-agent-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut o = opts(Some(curl.clone()), Some(dir.clone()));
    o.controller_token = Some("sluice_h4".into());
    let agent = Agent::start(&o).unwrap();
    let (first, auth) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(first.host, 4);
    assert_eq!(auth.as_deref(), Some("Bearer sluice_h4"));
    assert_eq!(
        first.api_token, None,
        "an agent with an open API sends none"
    );
    assert_eq!(first.api, agent.api_url());
    let (code, _) = put(
        &agent.api_url(),
        &serde_json::to_string(&config(7)).unwrap(),
    );
    assert_eq!(code, 200);
    let mut seen = false;
    for _ in 0..100 {
        if rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap()
            .0
            .config_version
            == 7
        {
            seen = true;
            break;
        }
    }
    assert!(seen, "a heartbeat reports version 7");
    assert!(agent_status(&agent.api_url())
        .controller_silent_ms
        .is_some());
    agent.shutdown();

    // A restarted agent runs the saved configuration before any controller push.
    let agent = Agent::start(&opts(None, Some(dir.clone()))).unwrap();
    assert_eq!(agent_status(&agent.api_url()).config_version, 7);
    agent.shutdown();
    server.unblock();
    let _ = t.join();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_options_are_refused_clearly() {
    let mut o = opts(None, None);
    o.prefix = "much-too-long-prefix".into();
    let e = Agent::start(&o).unwrap_err().to_string();
    assert!(e.contains("--prefix"), "{e}");
    let mut o = opts(None, None);
    o.netns = Some("sluice-no-such-netns".into());
    let e = Agent::start(&o).unwrap_err().to_string();
    assert!(e.contains("sluice-no-such-netns"), "{e}");
    // Seawall parameters that cannot converge are refused by name.
    let mut o = opts(None, None);
    o.seawall = Some(sluice_seawall::Config {
        decrease: 1.5,
        ..sluice_seawall::Config::default()
    });
    let e = Agent::start(&o).unwrap_err().to_string();
    assert!(e.contains("--seawall") && e.contains("decrease"), "{e}");
}
