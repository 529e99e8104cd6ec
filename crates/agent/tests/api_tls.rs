//! The agent's API over TLS, as `sluiced run` serves it with an https://
//! controller: the certificate comes from the controller's hosts' CA with the
//! registration, the controller's pushes arrive over it, and a controller
//! that requires it refuses a plain-HTTP agent. No namespaces needed.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::time::{Duration, Instant};

use sluice_agent::{Agent, AgentOptions};
use sluice_controller::client::{Client, ClientError};
use sluice_controller::tls::TlsOptions;
use sluice_controller::{serve, ServerHandle, ServerOptions};
use sluice_proto::HostRegistration;

fn controller(dir: &Path) -> (ServerHandle, Client) {
    let db = dir.join("c.db");
    let h = serve(ServerOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        db: db.clone(),
        state_url: "local".into(),
        admin_token_file: None,
        fabric_auth: true,
        tls: Some(TlsOptions::default()),
        placement: Default::default(),
        containment_threshold: sluice_controller::reconcile::DEFAULT_THRESHOLD,
        require_agent_tls: true,
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
    // The request is not kept: the host list shows no trace of it, and a
    // heartbeat without one gets no certificate.
    let ack = host
        .register_host(&registration("https://127.0.0.1:9", None))
        .unwrap();
    assert!(ack.api_cert.is_none());
    ctl.shutdown();
}
