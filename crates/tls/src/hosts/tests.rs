use super::*;

/// Runs a handshake between the two configurations in memory: whom the
/// server's client certificate names (if it presented one), or the error of
/// whichever side gave up.
fn handshake(
    client: Arc<rustls::ClientConfig>,
    server: Arc<rustls::ServerConfig>,
) -> Result<Option<Peer>, String> {
    let name = ServerName::try_from("10.0.0.7").unwrap();
    let mut c = rustls::ClientConnection::new(client, name).map_err(|e| e.to_string())?;
    let mut s = rustls::ServerConnection::new(server).map_err(|e| e.to_string())?;
    for _ in 0..10 {
        let mut buf = Vec::new();
        while c.wants_write() {
            c.write_tls(&mut buf).unwrap();
        }
        if !buf.is_empty() {
            s.read_tls(&mut buf.as_slice()).unwrap();
            s.process_new_packets()
                .map_err(|e| format!("server: {e}"))?;
        }
        let mut buf = Vec::new();
        while s.wants_write() {
            s.write_tls(&mut buf).unwrap();
        }
        if !buf.is_empty() {
            c.read_tls(&mut buf.as_slice()).unwrap();
            c.process_new_packets()
                .map_err(|e| format!("client: {e}"))?;
        }
        if !c.is_handshaking() && !s.is_handshaking() {
            return Ok(s
                .peer_certificates()
                .and_then(|p| peer_of(p.first()?))
                .map(|(p, _)| p));
        }
    }
    Err("handshake did not finish".into())
}

/// Host `host`'s certificate from `ca`, as its agent holds it.
fn host_cert(ca: &HostCa, host: u32) -> Arc<CertifiedKey> {
    let key = AgentKey::generate(host).unwrap();
    let (chain, _) = ca.sign(host, key.csr(), None, SystemTime::now()).unwrap();
    key.certified(&chain).unwrap()
}

fn served(ca: &HostCa, host: u32) -> Arc<rustls::ServerConfig> {
    served_trusting(ca, host, Arc::new(ClientTrust::with_ca(ca.pem()).unwrap()))
}

fn served_trusting(ca: &HostCa, host: u32, trust: Arc<ClientTrust>) -> Arc<rustls::ServerConfig> {
    let key = AgentKey::generate(host).unwrap();
    let (chain, _) = ca
        .sign(
            host,
            key.csr(),
            Some("10.0.0.7".parse().unwrap()),
            SystemTime::now(),
        )
        .unwrap();
    let slot = Arc::new(CertSlot::default());
    slot.set(key.certified(&chain).unwrap());
    server_config(slot, trust).unwrap()
}

#[test]
fn the_controller_reaches_the_host_it_means_and_no_other() {
    let ca = HostCa::generate().unwrap();
    let server = served(&ca, 7);
    handshake(client_config(ca.pem(), 7).unwrap(), server.clone()).unwrap();
    // Host 8's certificate does not answer for host 7, nor the reverse.
    let e = handshake(client_config(ca.pem(), 8).unwrap(), server).unwrap_err();
    assert!(
        e.contains("client") && e.contains("not valid for name"),
        "{e}"
    );
    // Another CA's certificate for the right host is refused.
    let other = HostCa::generate().unwrap();
    let e = handshake(client_config(ca.pem(), 7).unwrap(), served(&other, 7)).unwrap_err();
    // (Same subject name: found as the issuer, its signature fails.)
    assert!(e.contains("invalid peer certificate"), "{e}");
}

#[test]
fn an_agent_without_a_certificate_fails_the_handshake() {
    let ca = HostCa::generate().unwrap();
    let server = server_config(Arc::new(CertSlot::default()), Arc::default()).unwrap();
    assert!(handshake(client_config(ca.pem(), 7).unwrap(), server).is_err());
}

#[test]
fn an_expired_certificate_is_refused() {
    let ca = HostCa::generate().unwrap();
    let key = AgentKey::generate(7).unwrap();
    let long_ago = SystemTime::now() - LIFETIME - Duration::from_secs(86_400);
    let (chain, not_after) = ca.sign(7, key.csr(), None, long_ago).unwrap();
    assert!(not_after < SystemTime::now());
    let slot = Arc::new(CertSlot::default());
    slot.set(key.certified(&chain).unwrap());
    let e = handshake(
        client_config(ca.pem(), 7).unwrap(),
        server_config(slot, Arc::default()).unwrap(),
    )
    .unwrap_err();
    assert!(e.contains("certificate expired"), "{e}");
}

#[test]
fn requests_that_are_not_requests_are_refused_by_name() {
    let ca = HostCa::generate().unwrap();
    let e = ca.sign(1, "hello", None, SystemTime::now()).unwrap_err();
    assert!(
        e.to_string().starts_with("certificate request refused"),
        "{e}"
    );
    // A request whose signature does not verify (one byte of its body changed).
    let key = AgentKey::generate(1).unwrap();
    let pem = key.csr();
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let mut bytes = body.into_bytes();
    // Flip a base64 character in the middle (inside the signed subject info).
    let mid = bytes.len() / 3;
    bytes[mid] = if bytes[mid] == b'A' { b'B' } else { b'A' };
    let tampered = format!(
        "-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n",
        String::from_utf8(bytes).unwrap()
    );
    assert!(ca.sign(1, &tampered, None, SystemTime::now()).is_err());
}

#[test]
fn a_chain_for_another_key_is_refused() {
    let ca = HostCa::generate().unwrap();
    let a = AgentKey::generate(1).unwrap();
    let b = AgentKey::generate(1).unwrap();
    let (chain, _) = ca.sign(1, a.csr(), None, SystemTime::now()).unwrap();
    assert!(a.certified(&chain).is_ok());
    assert!(b.certified(&chain).is_err());
    assert!(a.certified("").is_err());
}

#[test]
fn the_ca_survives_a_restart_and_keeps_signing_for_the_same_root() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("h.pem"), dir.path().join("h.key"));
    let first = HostCa::load_or_create(&cert, &key).unwrap();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let again = HostCa::load_or_create(&cert, &key).unwrap();
    assert_eq!(first.pem(), again.pem());
    // Signed by the reloaded CA, trusted through the first one's certificate.
    handshake(client_config(first.pem(), 3).unwrap(), served(&again, 3)).unwrap();
    std::fs::remove_file(&key).unwrap();
    let e = HostCa::load_or_create(&cert, &key).unwrap_err().to_string();
    assert!(e.contains("h.key") && e.contains("missing"), "{e}");
}

#[test]
fn renewal_comes_at_half_the_remaining_validity() {
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    let end = t0 + Duration::from_secs(100);
    assert!(!renewal_due(t0, end, t0));
    assert!(!renewal_due(t0, end, t0 + Duration::from_secs(49)));
    assert!(renewal_due(t0, end, t0 + Duration::from_secs(50)));
    // Already past its end when received: renew at once.
    assert!(renewal_due(
        end + Duration::from_secs(1),
        end,
        end + Duration::from_secs(1)
    ));
}

#[test]
fn an_agent_learns_who_calls_it_and_refuses_certificates_of_another_ca() {
    let ca = HostCa::generate().unwrap();
    let server = served(&ca, 7);
    let me = ControllerCert::default();
    let now = SystemTime::now();
    let ctl = me.get(&ca, now).unwrap();
    // Kept until renewal is due, then made anew.
    assert!(Arc::ptr_eq(&ctl, &me.get(&ca, now).unwrap()));
    assert!(!Arc::ptr_eq(
        &ctl,
        &me.get(&ca, now + LIFETIME / 2).unwrap()
    ));
    let with = |ck| mutual_client_config(ca.pem(), 7, Some(ck)).unwrap();
    assert_eq!(
        handshake(with(ctl.clone()), server.clone()),
        Ok(Some(Peer::Controller))
    );
    // No certificate: the handshake goes through, as nobody in particular.
    assert_eq!(
        handshake(client_config(ca.pem(), 7).unwrap(), server.clone()),
        Ok(None)
    );
    // A host's certificate says it is that host, and nothing more.
    assert_eq!(
        handshake(with(host_cert(&ca, 3)), server.clone()),
        Ok(Some(Peer::Host(3)))
    );
    // Another CA's controller certificate is refused in the handshake.
    let other = HostCa::generate().unwrap();
    let forged = ControllerCert::default().get(&other, now).unwrap();
    let e = handshake(with(forged), server).unwrap_err();
    assert!(
        e.starts_with("server:") && e.contains("invalid peer certificate"),
        "{e}"
    );
    // An agent that does not know the CA yet refuses every certificate.
    let blind = served_trusting(&ca, 7, Arc::new(ClientTrust::default()));
    assert!(handshake(with(ctl), blind).is_err());
}

#[test]
fn peers_are_named_canonically() {
    for p in [Peer::Controller, Peer::Host(1), Peer::Host(4_000_000_000)] {
        assert_eq!(Peer::parse(&p.name()), Some(p));
    }
    for n in [
        "host-0.agents.sluice",
        "host-01.agents.sluice",
        "host-x.agents.sluice",
        "host-1.agents.sluice.evil",
        "controller.agents.sluice.",
        "10.0.0.1",
    ] {
        assert_eq!(Peer::parse(n), None, "{n}");
    }
}

#[test]
fn a_slot_counts_its_certificates_and_presents_them_as_a_client_too() {
    let ca = HostCa::generate().unwrap();
    let slot = CertSlot::default();
    assert_eq!(slot.generation(), 0);
    assert!(!ResolvesClientCert::has_certs(&slot));
    slot.set(host_cert(&ca, 2));
    assert_eq!(slot.generation(), 1);
    let ck = ResolvesClientCert::resolve(&slot, &[], &[]).unwrap();
    let (peer, end) = peer_of(&ck.cert[0]).unwrap();
    assert_eq!(peer, Peer::Host(2));
    assert!(end > SystemTime::now() + LIFETIME - Duration::from_secs(60));
    // A saved key signs the same way after a restart.
    let key = AgentKey::generate(2).unwrap();
    let again = AgentKey::from_pem(2, &key.key_pem()).unwrap();
    let (chain, _) = ca.sign(2, again.csr(), None, SystemTime::now()).unwrap();
    assert!(key.certified(&chain).is_ok());
}

#[test]
fn a_peer_line_names_the_peer_and_when_its_certificate_was_issued() {
    let ca = HostCa::generate().unwrap();
    let key = AgentKey::generate(5).unwrap();
    let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let (chain, _) = ca.sign(5, key.csr(), None, at).unwrap();
    let der = CertificateDer::pem_slice_iter(chain.as_bytes())
        .next()
        .unwrap()
        .unwrap();
    let pc = PeerCert::of(&der).unwrap();
    assert_eq!(
        pc,
        PeerCert {
            peer: Peer::Host(5),
            issued_secs: 1_800_000_000
        }
    );
    assert_eq!(pc.line(), "host-5.agents.sluice issued=1800000000");
    assert_eq!(PeerCert::parse(&pc.line()), Some(pc));
    for bad in [
        "host-5.agents.sluice",
        "host-5.agents.sluice issued=",
        "host-5.agents.sluice issued=soon",
        "nobody issued=1",
    ] {
        assert_eq!(PeerCert::parse(bad), None, "{bad}");
    }
}
