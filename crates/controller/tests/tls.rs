//! TLS on the controller's API: a client trusting the controller's CA gets
//! through; one without it, and plain HTTP to the TLS port, do not; a restart
//! keeps the certificate; `tls: None` still serves plain HTTP.

use std::path::Path;

use sluice_controller::client::{Client, ClientError};
use sluice_controller::tls::{ensure_generated, subject_names, GeneratedFiles, TlsOptions};
use sluice_controller::{serve, ServerHandle, ServerOptions};

fn start(db: &Path, tls: Option<TlsOptions>) -> (ServerHandle, String) {
    let h = serve(ServerOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        db: db.to_path_buf(),
        state_url: "local".into(),
        admin_token_file: None,
        fabric_auth: false,
        tls,
        placement: Default::default(),
        distribution: Default::default(),
        containment_threshold: sluice_controller::reconcile::DEFAULT_THRESHOLD,
        require_agent_tls: false,
        etcd: None,
    })
    .unwrap();
    let file = sluice_controller::service::default_admin_token_file(db);
    let secret = std::fs::read_to_string(file).unwrap();
    (h, secret)
}

fn figure4() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/tenant/figure4.yaml"
    ))
    .unwrap()
}

#[test]
fn a_client_needs_the_controllers_ca_and_https() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let (h, secret) = start(&db, Some(TlsOptions::default()));
    assert!(h.url().starts_with("https://"), "{}", h.url());
    let ca = h.ca_file().unwrap().to_path_buf();
    assert_eq!(ca, dir.path().join("c.ca.pem"));

    // With the CA: requests, a large body and many on one connection go through.
    let c = Client::new(&h.url())
        .with_token(Some(&secret))
        .with_ca_file(&ca)
        .unwrap();
    assert!(c.tenants().unwrap().is_empty());
    // A spec crosses whole: the controller read it, and has no host for it.
    match c.apply(None, &figure4()) {
        Err(ClientError::Api {
            status: 409,
            message,
        }) => {
            assert!(message.contains("tenant `acme`"), "{message}")
        }
        other => panic!("figure 4 without hosts: {other:?}"),
    }
    for _ in 0..20 {
        assert!(c.tenants().unwrap().is_empty());
    }
    let huge = "#".repeat(2 << 20);
    match c.apply_raw(Some("big"), &huge) {
        Err(ClientError::Api { status: 413, .. }) => {}
        other => panic!("a 2 MiB body through TLS: {other:?}"),
    }
    // The name `localhost` is in the certificate too.
    let local = Client::new(&h.url().replace("127.0.0.1", "localhost"))
        .with_ca_file(&ca)
        .unwrap();
    assert!(local.get_raw("/healthz").is_ok());

    // Without the CA: a certificate error that says what to give.
    let untrusted = Client::new(&h.url()).with_token(Some(&secret));
    match untrusted.tenants() {
        Err(ClientError::Transport(m)) => {
            assert!(m.contains("certificate") && m.contains("--ca-file"), "{m}")
        }
        other => panic!("no CA: {other:?}"),
    }

    // Plain HTTP to the TLS port: refused, naming the fix, and no token read.
    let plain = Client::new(&h.url().replace("https://", "http://")).with_token(Some(&secret));
    match plain.tenants() {
        Err(ClientError::Api {
            status: 400,
            message,
        }) => assert!(message.contains("https://"), "{message}"),
        other => panic!("plain HTTP: {other:?}"),
    }
}

#[test]
fn a_restart_keeps_the_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let (h, secret) = start(&db, Some(TlsOptions::default()));
    let ca = std::fs::read(h.ca_file().unwrap()).unwrap();
    let cert = std::fs::read(dir.path().join("c.tls.pem")).unwrap();
    h.shutdown();
    let (h, _) = start(&db, Some(TlsOptions::default()));
    assert_eq!(std::fs::read(h.ca_file().unwrap()).unwrap(), ca);
    assert_eq!(std::fs::read(dir.path().join("c.tls.pem")).unwrap(), cert);
    let c = Client::new(&h.url())
        .with_token(Some(&secret))
        .with_ca_file(&dir.path().join("c.ca.pem"))
        .unwrap();
    assert!(c.tenants().is_ok());
}

#[test]
fn an_operators_certificate_is_used_as_given() {
    let dir = tempfile::tempdir().unwrap();
    let own = GeneratedFiles::for_db(&dir.path().join("pki/own.db"));
    std::fs::create_dir(dir.path().join("pki")).unwrap();
    ensure_generated(
        &own,
        &subject_names("127.0.0.1".parse().unwrap(), &["ctl.example".into()]),
    )
    .unwrap();
    let db = dir.path().join("c.db");
    let (h, secret) = start(
        &db,
        Some(TlsOptions {
            cert: Some((own.cert.clone(), own.key.clone())),
            sans: vec![],
        }),
    );
    assert!(h.ca_file().is_none());
    assert!(!dir.path().join("c.ca.pem").exists());
    let c = Client::new(&h.url())
        .with_token(Some(&secret))
        .with_ca_file(&own.ca)
        .unwrap();
    assert!(c.tenants().is_ok());
}

#[test]
fn tls_off_serves_plain_http() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let (h, secret) = start(&db, None);
    assert!(h.url().starts_with("http://"));
    assert!(h.ca_file().is_none());
    assert!(!dir.path().join("c.tls.pem").exists());
    let c = Client::new(&h.url()).with_token(Some(&secret));
    assert!(c.tenants().unwrap().is_empty());
}

#[test]
fn a_silent_or_garbled_connection_does_not_hold_up_others() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let (h, secret) = start(&dir.path().join("c.db"), Some(TlsOptions::default()));
    // Connections that never finish a handshake, more than there are HTTP
    // workers.
    let silent: Vec<_> = (0..12)
        .map(|_| std::net::TcpStream::connect(h.addr()).unwrap())
        .collect();
    let mut garbled = std::net::TcpStream::connect(h.addr()).unwrap();
    garbled
        .write_all(&[0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5])
        .unwrap();
    let c = Client::new(&h.url())
        .with_token(Some(&secret))
        .with_ca_file(h.ca_file().unwrap())
        .unwrap();
    assert!(c.tenants().unwrap().is_empty());
    // The garbled one is closed (at most a TLS alert), never answered.
    let mut rest = Vec::new();
    garbled
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    if let Err(e) = garbled.read_to_end(&mut rest) {
        // A reset is a close too; a timeout is not.
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}");
    }
    assert!(rest.len() < 16 && !rest.starts_with(b"HTTP"), "{rest:?}");
    drop(silent);
}

/// The end-entity certificate a new TLS connection to `addr` is served,
/// trusting `ca` (PEM).
fn served_certificate(addr: std::net::SocketAddr, ca: &str) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(sluice_tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let mut conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).unwrap();
    let mut sock = std::net::TcpStream::connect(addr).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut sock).unwrap();
    }
    conn.peer_certificates().unwrap()[0].to_vec()
}

/// An operator rotates the controller's certificate by replacing its files:
/// new connections get the new one without a restart, clients trusting the
/// CA carry on, and a pair that does not belong together is not taken.
#[test]
fn a_replaced_certificate_is_served_without_a_restart() {
    use sluice_tls::hosts::{AgentKey, HostCa};
    let dir = tempfile::tempdir().unwrap();
    let ca = HostCa::generate().unwrap();
    let (cert, key) = (dir.path().join("ctl.pem"), dir.path().join("ctl.key"));
    let issue = |k: &AgentKey| {
        let now = std::time::SystemTime::now();
        ca.sign(1, k.csr(), Some("127.0.0.1".parse().unwrap()), now)
            .unwrap()
            .0
    };
    let (a, b) = (
        AgentKey::generate(1).unwrap(),
        AgentKey::generate(1).unwrap(),
    );
    std::fs::write(&cert, issue(&a)).unwrap();
    std::fs::write(&key, a.key_pem()).unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let (h, secret) = start(
        &dir.path().join("c.db"),
        Some(TlsOptions {
            cert: Some((cert.clone(), key.clone())),
            sans: vec![],
        }),
    );
    let c = Client::new(&h.url())
        .with_token(Some(&secret))
        .with_ca_file(&ca_file)
        .unwrap();
    assert!(c.tenants().is_ok());
    let first = served_certificate(h.addr(), ca.pem());
    // The operator's new certificate, written over the old files.
    let chain_b = issue(&b);
    std::fs::write(&key, b.key_pem()).unwrap();
    std::fs::write(&cert, &chain_b).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let second = loop {
        let now = served_certificate(h.addr(), ca.pem());
        if now != first {
            break now;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the new certificate was never served"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert!(c.tenants().is_ok(), "a client trusting the CA carries on");
    // A key that is not the certificate's: refused, the served one stays.
    std::fs::write(&key, a.key_pem()).unwrap();
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert_eq!(served_certificate(h.addr(), ca.pem()), second);
    assert!(c.tenants().is_ok());
    h.shutdown();
}
