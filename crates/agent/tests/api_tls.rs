//! The agent's API over TLS, as `sluiced run` serves it with an https://
//! controller: the certificate comes from the controller's hosts' CA with the
//! registration, the controller's pushes arrive over it, and a controller
//! that requires it refuses a plain-HTTP agent. No namespaces needed.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sluice_proto::HostHeartbeat;
use sluice_tls::hosts::{AgentKey, ControllerCert, HostCa};

use sluice_agent::{Agent, AgentOptions};
use sluice_controller::client::{Client, ClientError};
use sluice_controller::tls::TlsOptions;
use sluice_controller::{serve, ServerHandle, ServerOptions};
use sluice_proto::HostRegistration;

fn controller(dir: &Path) -> (ServerHandle, Client) {
    controller_at(dir, "127.0.0.1:0".parse().unwrap())
}

fn controller_at(dir: &Path, listen: std::net::SocketAddr) -> (ServerHandle, Client) {
    let db = dir.join("c.db");
    let h = serve(ServerOptions {
        listen,
        db: db.clone(),
        state_url: "local".into(),
        admin_token_file: None,
        fabric_auth: true,
        tls: Some(TlsOptions::default()),
        placement: Default::default(),
        distribution: Default::default(),
        containment_threshold: sluice_controller::reconcile::DEFAULT_THRESHOLD,
        require_agent_tls: true,
        etcd: None,
    })
    .unwrap();
    let secret =
        std::fs::read_to_string(sluice_controller::service::default_admin_token_file(&db)).unwrap();
    let c = Client::new(&h.url())
        .with_token(Some(secret.trim()))
        .with_ca_file(h.ca_file().unwrap())
        .unwrap();
    (h, c)
}

fn agent_opts(host: u32, ctl: &ServerHandle, token: &str) -> AgentOptions {
    AgentOptions {
        host,
        name: format!("h{host}"),
        netns: None,
        underlay: Ipv4Addr::new(10, 255, 0, host as u8),
        controller: Some(ctl.url()),
        controller_token: Some(token.into()),
        controller_tls: Some(sluice_agent::settings::tls_trusting(ctl.ca_file().unwrap()).unwrap()),
        api_token: Some(format!("secret-{host}")),
        listen: "127.0.0.1:0".into(),
        prefix: "t".into(),
        run_dir: None,
        udp: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0),
        instance_exe: None,
        suspect_after: None,
        seawall: None,
        vm_mtu: None,
        capacity: None,
        api_tls: true,
        siem: None,
        dataplane_threads: 1,
    }
}

fn wait_until(what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
    let end = Instant::now() + within;
    while !ok() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_agent_of_a_tls_controller_gets_its_certificate_and_its_pushes_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let (ctl, admin) = controller(dir.path());
    let token = admin.create_token("host-1", "host:1").unwrap().token;
    let agent = Agent::start(&agent_opts(1, &ctl, &token)).unwrap();
    assert!(
        agent.api_url().starts_with("https://"),
        "{}",
        agent.api_url()
    );
    // Registered, its configuration pushed to it over TLS and acknowledged.
    wait_until("host 1 in sync", Duration::from_secs(20), || {
        admin
            .hosts()
            .is_ok_and(|h| h.len() == 1 && h[0].in_sync && h[0].push_error.is_none())
    });
    let hosts = admin.hosts().unwrap();
    assert_eq!(hosts[0].api, agent.api_url());
    // The hosts' CA is kept next to the database; it vouches for host 1 only.
    let ca = std::fs::read_to_string(dir.path().join("c.hosts-ca.pem")).unwrap();
    let status = format!("{}/v1/status", agent.api_url());
    let for_host = |h: u32| {
        ureq::AgentBuilder::new()
            .tls_config(sluice_tls::hosts::client_config(&ca, h).unwrap())
            .build()
    };
    let st: sluice_proto::AgentStatus = for_host(1)
        .get(&status)
        .call()
        .unwrap()
        .into_json()
        .unwrap();
    assert!(st.config_version >= 1, "{st:?}");
    let e = for_host(2).get(&status).call().unwrap_err().to_string();
    assert!(e.contains("not valid for name"), "{e}");
    // Plain HTTP to the agent's port is told what to do.
    match ureq::get(&status.replacen("https://", "http://", 1)).call() {
        Err(ureq::Error::Status(400, r)) => {
            assert!(r.into_string().unwrap().contains("speaks TLS"))
        }
        other => panic!("plain HTTP to the agent's TLS port: {other:?}"),
    }
    agent.shutdown();
    ctl.shutdown();
}

fn registration(api: &str, csr: Option<String>) -> HostRegistration {
    HostRegistration {
        host: 2,
        name: "h2".into(),
        underlay: Ipv4Addr::new(10, 255, 0, 2),
        api: api.into(),
        config_version: 0,
        api_token: None,
        capacity: None,
        api_csr: csr,
    }
}

#[test]
fn a_controller_requiring_agent_tls_refuses_plain_agents_and_bad_requests() {
    let dir = tempfile::tempdir().unwrap();
    let (ctl, admin) = controller(dir.path());
    let token = admin.create_token("host-2", "host:2").unwrap().token;
    let host = Client::new(&ctl.url())
        .with_token(Some(&token))
        .with_ca_file(ctl.ca_file().unwrap())
        .unwrap();
    let refused = |r: Result<_, ClientError>, want: &str| match r {
        Err(ClientError::Api {
            status: 400,
            message,
        }) => assert!(message.contains(want), "{message}"),
        other => panic!("expected a 400 naming {want:?}: {other:?}"),
    };
    refused(
        host.register_host(&registration("http://127.0.0.1:9", None)),
        "requires agents to serve their API over TLS",
    );
    refused(
        host.register_host(&registration("https://127.0.0.1:9", Some("garbage".into()))),
        "certificate request refused",
    );
    // Nothing was registered by the refused requests.
    assert!(admin.hosts().unwrap().is_empty());
    // A good request gets a chain for this host: its certificate, then the CA.
    let key = sluice_tls::hosts::AgentKey::generate(2).unwrap();
    let ack = host
        .register_host(&registration("https://127.0.0.1:9", Some(key.csr().into())))
        .unwrap();
    let chain = ack.api_cert.expect("a certificate");
    let ca = std::fs::read_to_string(dir.path().join("c.hosts-ca.pem")).unwrap();
    assert!(chain.ends_with(&ca), "the chain ends with the hosts' CA");
    assert!(key.certified(&chain).is_ok());
    let end = ack.api_cert_not_after_ms.unwrap();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(end > now_ms + 29 * 86_400_000, "valid for about 30 days");
    // The token was a bootstrap token: spent by the certificate it got, it
    // registers nothing any more, and nothing changes.
    match host.register_host(&registration("https://127.0.0.1:8", None)) {
        Err(ClientError::Api { status: 401, .. }) => {}
        other => panic!("a spent bootstrap token: {other:?}"),
    }
    assert_eq!(admin.hosts().unwrap()[0].api, "https://127.0.0.1:9");
    assert!(admin.tokens().unwrap().iter().all(|t| t.name != "host-2"));
    // The answer lost in transit: the agent asks again with the same token
    // and the same key, and gets a certificate for that key again…
    let again = host
        .register_host(&registration("https://127.0.0.1:9", Some(key.csr().into())))
        .expect("the same key's request answered again");
    assert!(key.certified(&again.api_cert.unwrap()).is_ok());
    // …but the spent token gets nothing else: not another key's certificate
    // (whoever stole the token lacks the agent's key), nor any read.
    let thief = sluice_tls::hosts::AgentKey::generate(2).unwrap();
    match host.register_host(&registration(
        "https://127.0.0.1:9",
        Some(thief.csr().into()),
    )) {
        Err(ClientError::Api {
            status: 401,
            message,
        }) => {
            assert!(message.contains("spent"), "{message}")
        }
        other => panic!("another key with a spent token: {other:?}"),
    }
    match host.get_raw("/v1/hosts/2/config") {
        Err(ClientError::Api { status: 401, .. }) => {}
        other => panic!("a read with a spent token: {other:?}"),
    }
    let audit = admin.get_raw("/v1/audit").unwrap();
    assert!(audit.contains("answered again for the same key"), "{audit}");
    // Revoking the host forgets the spent token at once.
    admin.revoke_host(2).unwrap();
    match host.register_host(&registration("https://127.0.0.1:9", Some(key.csr().into()))) {
        Err(ClientError::Api { status: 401, .. }) => {}
        other => panic!("a spent token of a revoked host: {other:?}"),
    }
    admin.release_host(2).unwrap();
    // The request is not kept: a heartbeat without one gets no certificate.
    let ack = admin
        .register_host(&registration("https://127.0.0.1:9", None))
        .unwrap();
    assert!(ack.api_cert.is_none());
    ctl.shutdown();
}

/// The hosts' CA of the controller whose database is in `dir` (a test may
/// read its key: it plays a host that got a certificate of its own).
fn hosts_ca(dir: &Path) -> HostCa {
    HostCa::load_or_create(&dir.join("c.hosts-ca.pem"), &dir.join("c.hosts-ca.key")).unwrap()
}

/// A client of the controller presenting host `host`'s certificate from `ca`.
fn as_host(ctl: &ServerHandle, ca: &HostCa, host: u32) -> ureq::Agent {
    let key = AgentKey::generate(host).unwrap();
    let (chain, _) = ca.sign(host, key.csr(), None, SystemTime::now()).unwrap();
    client_with(ctl, &chain, &key.key_pem())
}

fn heartbeat_of(host: u32, underlay: Ipv4Addr, api: &str) -> HostHeartbeat {
    HostHeartbeat {
        registration: HostRegistration {
            host,
            underlay,
            api: api.into(),
            ..registration(api, None)
        },
        instances: Vec::new(),
        chains: Vec::new(),
        accusations: Vec::new(),
        backend_checks: Vec::new(),
        peers: Vec::new(),
    }
}

fn status_of(r: Result<ureq::Response, ureq::Error>) -> u16 {
    match r {
        Ok(r) => r.status(),
        Err(ureq::Error::Status(c, _)) => c,
        Err(e) => panic!("no answer: {e}"),
    }
}

/// A client of the controller presenting the certificate and key in `run`
/// (what an agent keeps there).
fn with_agent_files(ctl: &ServerHandle, run: &Path) -> ureq::Agent {
    let chain = std::fs::read_to_string(run.join("api-cert.pem")).unwrap();
    let key = std::fs::read_to_string(run.join("api-key.pem")).unwrap();
    client_with(ctl, &chain, &key)
}

#[test]
fn a_revoked_host_is_refused_and_contained_until_it_rejoins_and_is_released() {
    let dir = tempfile::tempdir().unwrap();
    let (ctl, admin) = controller(dir.path());
    let token = admin.create_token("host-1", "host:1").unwrap().token;
    let run = dir.path().join("run1");
    let agent = Agent::start(&AgentOptions {
        run_dir: Some(run.clone()),
        ..agent_opts(1, &ctl, &token)
    })
    .unwrap();
    wait_until("host 1 in sync", Duration::from_secs(20), || {
        admin
            .hosts()
            .is_ok_and(|h| h.len() == 1 && h[0].in_sync && h[0].push_error.is_none())
    });
    let hosts_url = format!("{}/v1/hosts", ctl.url());
    let api = admin.hosts().unwrap()[0].api.clone();
    let own = heartbeat_of(1, Ipv4Addr::new(10, 255, 0, 1), &api);
    // The agent's own certificate (as a thief who copied its files would use it).
    let stolen = with_agent_files(&ctl, &run);
    assert_eq!(status_of(stolen.post(&hosts_url).send_json(&own)), 200);
    // A spare bootstrap token for host 1, not spent yet.
    let spare = admin.create_token("host-1-spare", "host:1").unwrap().token;
    // The agent stops first: its heartbeats would only be refused from now on.
    agent.shutdown();

    let answer = admin.revoke_host(1).unwrap();
    assert_eq!(answer["contained"], true, "{answer}");
    assert_eq!(
        answer["tokens_deleted"],
        serde_json::json!(["host-1-spare"])
    );
    assert_eq!(admin.containment().unwrap().contained, [1]);
    // The copied certificate and the spare token are worth nothing now.
    match stolen.post(&hosts_url).send_json(&own) {
        Err(ureq::Error::Status(401, r)) => {
            let text = r.into_string().unwrap();
            assert!(text.contains("revoked"), "{text}");
        }
        other => panic!("a revoked certificate: {other:?}"),
    }
    let with_spare = Client::new(&ctl.url())
        .with_token(Some(&spare))
        .with_ca_file(ctl.ca_file().unwrap())
        .unwrap();
    match with_spare.heartbeat(&own) {
        Err(ClientError::Api { status: 401, .. }) => {}
        other => panic!("a revoked host's token: {other:?}"),
    }
    // Only an operator revokes: a host cannot revoke another (or itself).
    let ca = hosts_ca(dir.path());
    let h2 = as_host(&ctl, &ca, 2);
    let revoke2 = format!("{}/v1/hosts/1/revoke", ctl.url());
    assert_eq!(status_of(h2.post(&revoke2).send_string("{}")), 403);
    // Revocations outlive a restart of the controller.
    ctl.shutdown();
    let (ctl, admin) = controller_at(dir.path(), "127.0.0.1:0".parse().unwrap());
    let hosts_url = format!("{}/v1/hosts", ctl.url());
    let stolen = with_agent_files(&ctl, &run);
    assert_eq!(status_of(stolen.post(&hosts_url).send_json(&own)), 401);

    // Re-joining: a certificate issued after the revocation is accepted (a
    // certificate issued in the revocation's own second is not: signed here
    // as of two seconds later rather than waiting for the clock)...
    let key = AgentKey::generate(1).unwrap();
    let later = SystemTime::now() + Duration::from_secs(2);
    let (chain, _) = ca.sign(1, key.csr(), None, later).unwrap();
    let fresh = client_with(&ctl, &chain, &key.key_pem());
    assert_eq!(status_of(fresh.post(&hosts_url).send_json(&own)), 200);
    // ... but the host stays contained until an operator releases it.
    assert_eq!(admin.containment().unwrap().contained, [1]);
    assert!(admin.release_host(1).unwrap());
    assert!(admin.containment().unwrap().contained.is_empty());
    // The old certificate stays revoked.
    assert_eq!(status_of(stolen.post(&hosts_url).send_json(&own)), 401);
    ctl.shutdown();
}

/// A client presenting `chain` with `key_pem`, trusting the controller's CA.
fn client_with(ctl: &ServerHandle, chain: &str, key_pem: &str) -> ureq::Agent {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(chain.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap();
    let private = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ctl.ca_file().unwrap()).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(sluice_tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, private)
        .unwrap();
    ureq::AgentBuilder::new()
        .tls_config(Arc::new(config))
        .build()
}

#[test]
fn after_joining_host_and_controller_speak_only_mutual_tls() {
    let dir = tempfile::tempdir().unwrap();
    let (ctl, admin) = controller(dir.path());
    let token = admin.create_token("host-1", "host:1").unwrap().token;
    let run = dir.path().join("run1");
    let opts = AgentOptions {
        run_dir: Some(run.clone()),
        ..agent_opts(1, &ctl, &token)
    };
    let agent = Agent::start(&opts).unwrap();
    wait_until("host 1 in sync", Duration::from_secs(20), || {
        admin
            .hosts()
            .is_ok_and(|h| h.len() == 1 && h[0].in_sync && h[0].push_error.is_none())
    });
    let api = agent.api_url();
    let underlay = admin.hosts().unwrap()[0].underlay.clone();
    // The bootstrap token is spent: replayed, it changes nothing.
    assert!(admin.tokens().unwrap().iter().all(|t| t.name != "host-1"));
    let replay = Client::new(&ctl.url())
        .with_token(Some(&token))
        .with_ca_file(ctl.ca_file().unwrap())
        .unwrap();
    let moved = heartbeat_of(1, Ipv4Addr::new(10, 9, 9, 9), "https://10.9.9.9:1");
    match replay.heartbeat(&moved) {
        Err(ClientError::Api { status: 401, .. }) => {}
        other => panic!("a replayed bootstrap token: {other:?}"),
    }
    assert_eq!(admin.hosts().unwrap()[0].underlay, underlay);
    assert_eq!(admin.hosts().unwrap()[0].api, api);
    // The agent keeps its key and certificate for its owner only.
    use std::os::unix::fs::PermissionsExt;
    for f in ["api-key.pem", "api-cert.pem"] {
        let mode = std::fs::metadata(run.join(f)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{f}");
    }

    // Host 2's certificate speaks for host 2 only: not as host 1, whose
    // underlay and API stay as they are.
    let ca = hosts_ca(dir.path());
    let hosts_url = format!("{}/v1/hosts", ctl.url());
    let h2 = as_host(&ctl, &ca, 2);
    assert_eq!(status_of(h2.post(&hosts_url).send_json(&moved)), 403);
    assert_eq!(admin.hosts().unwrap()[0].underlay, underlay);
    // ... nor does an operator's token next to it make it more.
    let r = h2
        .post(&hosts_url)
        .set(
            "Authorization",
            &format!("Bearer {}", admin.token().unwrap()),
        )
        .send_json(&moved);
    assert_eq!(status_of(r), 403);
    let own = heartbeat_of(2, Ipv4Addr::new(10, 255, 0, 2), "https://127.0.0.1:9");
    assert_eq!(status_of(h2.post(&hosts_url).send_json(&own)), 200);
    assert!(admin.hosts().unwrap().iter().any(|h| h.id == 2));
    // An operator may still re-register host 1 (then host 1's own heartbeat
    // puts it back).
    admin.heartbeat(&moved).unwrap();
    assert!(admin
        .hosts()
        .unwrap()
        .iter()
        .any(|h| h.underlay == "10.9.9.9"));
    wait_until("host 1 back", Duration::from_secs(10), || {
        admin
            .hosts()
            .is_ok_and(|h| h.iter().any(|h| h.id == 1 && h.api == api))
    });

    // The agent's API takes changes from the controller's certificate only.
    let config = format!("{api}/v1/config");
    let bearer = "Bearer secret-1";
    let body = "{}";
    let with = |ck| {
        ureq::AgentBuilder::new()
            .tls_config(sluice_tls::hosts::mutual_client_config(ca.pem(), 1, ck).unwrap())
            .build()
    };
    let anonymous = with(None);
    for (r, what) in [
        (
            anonymous
                .put(&config)
                .set("Authorization", bearer)
                .send_string(body),
            "PUT /v1/config",
        ),
        (
            anonymous.get(&config).set("Authorization", bearer).call(),
            "GET /v1/config",
        ),
        (
            anonymous
                .get(&format!("{api}/v1/eve"))
                .set("Authorization", bearer)
                .call(),
            "GET /v1/eve",
        ),
    ] {
        assert_eq!(status_of(r), 401, "{what} without a client certificate");
    }
    // Monitoring reads need none.
    assert_eq!(
        status_of(anonymous.get(&format!("{api}/metrics")).call()),
        200
    );
    assert_eq!(
        status_of(anonymous.get(&format!("{api}/v1/status")).call()),
        200
    );
    // A host's certificate is not the controller's.
    let host_ck = {
        let key = AgentKey::generate(2).unwrap();
        let (chain, _) = ca.sign(2, key.csr(), None, SystemTime::now()).unwrap();
        key.certified(&chain).unwrap()
    };
    let r = with(Some(host_ck))
        .put(&config)
        .set("Authorization", bearer)
        .send_string(body);
    assert_eq!(status_of(r), 403);
    // Another CA's "controller" fails the handshake.
    let forged = ControllerCert::default()
        .get(&HostCa::generate().unwrap(), SystemTime::now())
        .unwrap();
    let e = with(Some(forged))
        .put(&config)
        .set("Authorization", bearer)
        .send_string(body);
    assert!(matches!(e, Err(ureq::Error::Transport(_))), "{e:?}");
    // The controller's own certificate (made from the same CA) is let
    // through to the configuration's validation.
    let ctl_ck = ControllerCert::default()
        .get(&ca, SystemTime::now())
        .unwrap();
    let r = with(Some(ctl_ck))
        .get(&config)
        .set("Authorization", bearer)
        .call();
    assert_eq!(status_of(r), 200);
    agent.shutdown();

    // A restart keeps the certificate: no new token needed (the old one is
    // spent), and the controller's pushes reach it again.
    let again = Agent::start(&opts).unwrap();
    wait_until(
        "host 1 in sync after a restart",
        Duration::from_secs(20),
        || {
            admin.hosts().is_ok_and(|h| {
                h.iter().any(|h| {
                    h.id == 1 && h.api == again.api_url() && h.in_sync && h.push_error.is_none()
                })
            })
        },
    );
    // A restarted controller (its hosts' CA reloaded) takes the same
    // certificate: host 1 is heard again, though it has no token left.
    let addr = ctl.addr();
    ctl.shutdown();
    let (ctl, admin) = controller_at(dir.path(), addr);
    wait_until(
        "host 1 heard by the restarted controller",
        Duration::from_secs(20),
        || {
            admin.hosts().is_ok_and(|h| {
                h.iter()
                    .any(|h| h.id == 1 && h.alive && h.in_sync && h.push_error.is_none())
            })
        },
    );
    again.shutdown();

    // Its disk lost, a host re-joins with a new bootstrap token an operator
    // mints (the name is free again).
    let fresh = admin.create_token("host-1", "host:1").unwrap().token;
    let lost = AgentOptions {
        run_dir: Some(dir.path().join("run1-new")),
        ..agent_opts(1, &ctl, &fresh)
    };
    let rejoined = Agent::start(&lost).unwrap();
    wait_until("host 1 re-joined", Duration::from_secs(20), || {
        admin.hosts().is_ok_and(|h| {
            h.iter()
                .any(|h| h.id == 1 && h.api == rejoined.api_url() && h.in_sync)
        })
    });
    assert!(admin.tokens().unwrap().iter().all(|t| t.name != "host-1"));
    rejoined.shutdown();

    // The controller lost its hosts' CA: the saved certificate is refused in
    // the handshake, and the agent joins again with a new bootstrap token
    // (no file to delete on the host).
    let addr = ctl.addr();
    ctl.shutdown();
    std::fs::remove_file(dir.path().join("c.hosts-ca.pem")).unwrap();
    std::fs::remove_file(dir.path().join("c.hosts-ca.key")).unwrap();
    let (ctl, admin) = controller_at(dir.path(), addr);
    let newer = admin.create_token("host-1-again", "host:1").unwrap().token;
    let back = Agent::start(&AgentOptions {
        controller_token: Some(newer),
        ..lost.clone()
    })
    .unwrap();
    wait_until("host 1 joined the new CA", Duration::from_secs(20), || {
        admin.hosts().is_ok_and(|h| {
            h.iter().any(|h| {
                h.id == 1 && h.api == back.api_url() && h.in_sync && h.push_error.is_none()
            })
        })
    });
    assert!(admin
        .tokens()
        .unwrap()
        .iter()
        .all(|t| t.name != "host-1-again"));
    back.shutdown();
    ctl.shutdown();
}

/// Not a pass/fail test: what mutual TLS adds to a call on a new connection
/// (every push is one). Run with
/// `cargo test -p sluice-agent --release --test api_tls -- --ignored --nocapture handshake_cost`.
#[test]
#[ignore]
fn handshake_cost() {
    let dir = tempfile::tempdir().unwrap();
    let (ctl, admin) = controller(dir.path());
    let token = admin.create_token("host-1", "host:1").unwrap().token;
    let agent = Agent::start(&agent_opts(1, &ctl, &token)).unwrap();
    wait_until("host 1 in sync", Duration::from_secs(20), || {
        admin.hosts().is_ok_and(|h| h.len() == 1 && h[0].in_sync)
    });
    let ca = hosts_ca(dir.path());
    let me = ControllerCert::default()
        .get(&ca, SystemTime::now())
        .unwrap();
    // The same open read both ways: the difference is the client
    // certificate's part of the handshake (and the request's tag).
    let status = format!("{}/v1/status", agent.api_url());
    let n = 2000;
    for (what, ck) in [
        ("server certificate only", None),
        ("mutual TLS", Some(me.clone())),
        ("server certificate only", None),
        ("mutual TLS", Some(me)),
    ] {
        let t = Instant::now();
        for _ in 0..n {
            // A new configuration (no resumption) and connection per call, as
            // the controller's pushes have.
            let config = sluice_tls::hosts::mutual_client_config(ca.pem(), 1, ck.clone()).unwrap();
            let c = ureq::AgentBuilder::new().tls_config(config).build();
            assert_eq!(status_of(c.get(&status).call()), 200);
        }
        let per = t.elapsed() / n;
        println!("{what}: {n} calls on new connections, {per:?} each");
    }
    // What the controller does now: one client per host, kept, so calls
    // reuse its mutually authenticated connection.
    let config = sluice_tls::hosts::mutual_client_config(ca.pem(), 1, Some(me_again(&ca))).unwrap();
    let c = ureq::AgentBuilder::new().tls_config(config).build();
    let t = Instant::now();
    for _ in 0..n {
        assert_eq!(status_of(c.get(&status).call()), 200);
    }
    println!(
        "mutual TLS, one kept client: {n} calls, {:?} each",
        t.elapsed() / n
    );
    agent.shutdown();
    ctl.shutdown();
}

fn me_again(ca: &HostCa) -> std::sync::Arc<rustls::sign::CertifiedKey> {
    ControllerCert::default()
        .get(ca, SystemTime::now())
        .unwrap()
}
