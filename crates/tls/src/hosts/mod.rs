//! The hosts' CA and the agents' API certificates.
//!
//! An agent whose controller speaks TLS serves its own API over TLS too: it
//! makes a key pair at start and sends a certificate request with its
//! registration (a heartbeat carrying its host token). The controller signs
//! it with the hosts' CA ([`HostCa::sign`]) for two names: the host's
//! identity [`host_name`]`(id)` and the address of the agent's API (so
//! Prometheus and curl can check it too), valid for [`LIFETIME`]. The agent
//! asks again once half of that has passed ([`renewal_due`]), with a new key.
//!
//! The controller calls an agent with [`mutual_client_config`]: it trusts the
//! hosts' CA only and checks the certificate names the host it means to
//! reach, whatever address that host registered; and it presents a client
//! certificate of the same CA naming [`CONTROLLER_NAME`] ([`ControllerCert`]),
//! which an agent requires ([`ClientTrust`], [`server_config`]) for
//! everything but monitoring reads. A host's certificate is a client
//! certificate too: the agent presents it to the controller, which takes the
//! host's identity from it ([`peer_of`]). A host's one-time bootstrap token
//! registers only its own id, so a subverted host cannot obtain a certificate
//! that answers for another host or for the controller.

use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType, PKCS_ECDSA_P256_SHA256,
};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::ResolvesClientCert;
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

/// How long an agent's API certificate is valid.
pub const LIFETIME: Duration = Duration::from_secs(30 * 24 * 3600);
/// How far back a certificate's validity starts, for hosts whose clocks lag.
const BACKDATE: Duration = Duration::from_secs(3600);

/// Why a certificate could not be made, read or used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or written.
    #[error("{path}: {msg}")]
    File {
        /// The file.
        path: String,
        /// Why.
        msg: String,
    },
    /// rcgen could not make a key, request or certificate.
    #[error("cannot generate {what}: {msg}")]
    Generate {
        /// What was being made.
        what: &'static str,
        /// Why.
        msg: String,
    },
    /// A certificate request that does not parse or whose signature does not
    /// verify.
    #[error("certificate request refused: {0}")]
    Request(String),
    /// A certificate or key rustls refuses.
    #[error("certificate refused: {0}")]
    Certificate(String),
}

fn gen(what: &'static str) -> impl Fn(rcgen::Error) -> TlsError {
    move |e| TlsError::Generate {
        what,
        msg: e.to_string(),
    }
}

fn file_err(path: &Path, e: impl std::fmt::Display) -> TlsError {
    TlsError::File {
        path: path.display().to_string(),
        msg: e.to_string(),
    }
}

/// The name every certificate of host `host` carries, and the only one the
/// controller accepts from it.
pub fn host_name(host: u32) -> String {
    format!("host-{host}.agents.sluice")
}

/// The name of the controller's client certificate, and the only client an
/// agent takes changes from.
pub const CONTROLLER_NAME: &str = "controller.agents.sluice";

/// Whom a certificate of the hosts' CA names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Peer {
    /// The controller ([`CONTROLLER_NAME`]).
    Controller,
    /// Host `id`'s agent ([`host_name`]).
    Host(u32),
}

impl Peer {
    /// The certificate name of this peer.
    pub fn name(&self) -> String {
        match self {
            Peer::Controller => CONTROLLER_NAME.to_string(),
            Peer::Host(h) => host_name(*h),
        }
    }

    /// The peer a certificate name stands for (`None`: not one of ours).
    pub fn parse(name: &str) -> Option<Peer> {
        if name == CONTROLLER_NAME {
            return Some(Peer::Controller);
        }
        let id = name.strip_prefix("host-")?.strip_suffix(".agents.sluice")?;
        match id.parse::<u32>() {
            Ok(h) if h > 0 && id == h.to_string() => Some(Peer::Host(h)),
            _ => None,
        }
    }
}

/// What the TLS terminator tells the server behind it about a verified
/// client certificate: whom it names and when it was issued (its `notBefore`
/// plus the backdating every certificate of the hosts' CA gets), so that the
/// controller can refuse the certificates of a host it revoked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCert {
    /// Whom the certificate names.
    pub peer: Peer,
    /// When it was issued, Unix seconds.
    pub issued_secs: u64,
}

impl PeerCert {
    /// The certificate's identity of an (already verified) end-entity
    /// certificate, if it names one of [`Peer`]'s.
    pub fn of(der: &CertificateDer<'_>) -> Option<PeerCert> {
        use x509_parser::prelude::*;
        let (_, cert) = X509Certificate::from_der(der.as_ref()).ok()?;
        let (peer, _) = peer_of(der)?;
        let not_before = cert.validity().not_before.timestamp().max(0) as u64;
        Some(PeerCert {
            peer,
            issued_secs: not_before + BACKDATE.as_secs(),
        })
    }

    /// As one header line value: `NAME issued=SECS`.
    pub fn line(&self) -> String {
        format!("{} issued={}", self.peer.name(), self.issued_secs)
    }

    /// Reads [`PeerCert::line`]'s value back.
    pub fn parse(line: &str) -> Option<PeerCert> {
        let (name, issued) = line.split_once(" issued=")?;
        Some(PeerCert {
            peer: Peer::parse(name)?,
            issued_secs: issued.parse().ok()?,
        })
    }
}

/// The peer an (already verified) end-entity certificate names: its first
/// DNS name that is one of [`Peer`]'s, and the end of its validity.
pub fn peer_of(der: &CertificateDer<'_>) -> Option<(Peer, SystemTime)> {
    use x509_parser::prelude::*;
    let (_, cert) = X509Certificate::from_der(der.as_ref()).ok()?;
    let end = SystemTime::UNIX_EPOCH
        + Duration::from_secs(cert.validity().not_after.timestamp().max(0) as u64);
    let san = cert.subject_alternative_name().ok()??;
    san.value.general_names.iter().find_map(|n| match n {
        GeneralName::DNSName(d) => Peer::parse(d).map(|p| (p, end)),
        _ => None,
    })
}

/// The hosts' CA: its certificate and the key that signs agents' certificates.
pub struct HostCa {
    cert: rcgen::Certificate,
    key: KeyPair,
    pem: String,
}

impl std::fmt::Debug for HostCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostCa").finish_non_exhaustive()
    }
}

impl HostCa {
    /// A new CA (ECDSA P-256), kept in memory only.
    pub fn generate() -> Result<HostCa, TlsError> {
        let key =
            KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(gen("the hosts' CA key"))?;
        let mut params =
            CertificateParams::new(Vec::<String>::new()).map_err(gen("the hosts' CA"))?;
        params
            .distinguished_name
            .push(DnType::CommonName, "Sluice hosts CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params.self_signed(&key).map_err(gen("the hosts' CA"))?;
        let pem = cert.pem();
        Ok(HostCa { cert, key, pem })
    }

    /// The CA in `cert` and `key` (PEM), created there first if neither
    /// exists (the key with mode 0600, written before the certificate). One
    /// without the other is an error naming the missing file.
    pub fn load_or_create(cert: &Path, key: &Path) -> Result<HostCa, TlsError> {
        match (cert.exists(), key.exists()) {
            (false, false) => {
                let ca = HostCa::generate()?;
                crate::write_file(key, &ca.key.serialize_pem(), 0o600)
                    .map_err(|e| file_err(key, e))?;
                crate::write_file(cert, &ca.pem, 0o644).map_err(|e| file_err(cert, e))?;
                Ok(ca)
            }
            (true, true) => {
                let pem = std::fs::read_to_string(cert).map_err(|e| file_err(cert, e))?;
                let key_pem = std::fs::read_to_string(key).map_err(|e| file_err(key, e))?;
                let key_pair = KeyPair::from_pem(&key_pem).map_err(|e| file_err(key, e))?;
                // rcgen signs with a Certificate: the stored one's parameters,
                // self-signed again with the same key, issue certificates
                // that chain to the stored one (same subject, same key).
                let params =
                    CertificateParams::from_ca_cert_pem(&pem).map_err(|e| file_err(cert, e))?;
                let issuer = params
                    .self_signed(&key_pair)
                    .map_err(|e| file_err(cert, e))?;
                Ok(HostCa {
                    cert: issuer,
                    key: key_pair,
                    pem,
                })
            }
            (true, false) => Err(file_err(
                key,
                "missing, while the hosts' CA certificate exists",
            )),
            (false, true) => Err(file_err(cert, "missing, while the hosts' CA key exists")),
        }
    }

    /// The CA's certificate (PEM): what clients of the agents' APIs trust.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// The public key (DER) a certificate request asks to certify; its
    /// signature must verify, so whoever sent it holds the private key.
    pub fn request_key(csr_pem: &str) -> Result<Vec<u8>, TlsError> {
        use rcgen::PublicKeyData;
        let csr = CertificateSigningRequestParams::from_pem(csr_pem)
            .map_err(|e| TlsError::Request(e.to_string()))?;
        Ok(csr.public_key.der_bytes().to_vec())
    }

    /// Signs the key in `csr_pem` (whose signature must verify) for host
    /// `host`, valid from an hour before `now` for [`LIFETIME`], for
    /// [`host_name`]`(host)` and `addr`. Whatever else the request asks for
    /// is ignored. Returns the chain (the certificate, then the CA's) in PEM
    /// and the end of its validity.
    pub fn sign(
        &self,
        host: u32,
        csr_pem: &str,
        addr: Option<IpAddr>,
        now: SystemTime,
    ) -> Result<(String, SystemTime), TlsError> {
        let csr = CertificateSigningRequestParams::from_pem(csr_pem)
            .map_err(|e| TlsError::Request(e.to_string()))?;
        let mut params =
            CertificateParams::new(vec![host_name(host)]).map_err(gen("a host certificate"))?;
        if let Some(ip) = addr {
            params.subject_alt_names.push(SanType::IpAddress(ip));
        }
        params
            .distinguished_name
            .push(DnType::CommonName, format!("host-{host}"));
        let not_after = now + LIFETIME;
        params.not_before = (now - BACKDATE).into();
        params.not_after = not_after.into();
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        // A server's (the agent's API) and a client's (its calls to the
        // controller).
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.use_authority_key_identifier_extension = true;
        let cert = params
            .signed_by(&csr.public_key, &self.cert, &self.key)
            .map_err(gen("a host certificate"))?;
        Ok((format!("{}{}", cert.pem(), self.pem), not_after))
    }

    /// A new key and a client certificate for [`CONTROLLER_NAME`] (client
    /// use only), valid from an hour before `now` for [`LIFETIME`]; with the
    /// end of its validity. The key never leaves memory.
    pub fn sign_controller(
        &self,
        now: SystemTime,
    ) -> Result<(Arc<CertifiedKey>, SystemTime), TlsError> {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
            .map_err(gen("the controller's client key"))?;
        let mut params = CertificateParams::new(vec![CONTROLLER_NAME.to_string()])
            .map_err(gen("the controller's client certificate"))?;
        params
            .distinguished_name
            .push(DnType::CommonName, "Sluice controller");
        let not_after = now + LIFETIME;
        params.not_before = (now - BACKDATE).into();
        params.not_after = not_after.into();
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .map_err(gen("the controller's client certificate"))?;
        let chain = vec![cert.der().clone(), self.cert.der().clone()];
        Ok((certified_key(chain, &key)?, not_after))
    }
}

fn certified_key(
    chain: Vec<CertificateDer<'static>>,
    key: &KeyPair,
) -> Result<Arc<CertifiedKey>, TlsError> {
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let signer = crate::provider()
        .key_provider
        .load_private_key(der)
        .map_err(|e| TlsError::Certificate(e.to_string()))?;
    let ck = CertifiedKey::new(chain, signer);
    ck.keys_match()
        .map_err(|e| TlsError::Certificate(e.to_string()))?;
    Ok(Arc::new(ck))
}

/// The controller's client certificate, made from the hosts' CA when first
/// asked for and again once [`renewal_due`].
#[derive(Debug, Default)]
pub struct ControllerCert {
    current: RwLock<Option<(Arc<CertifiedKey>, SystemTime, SystemTime)>>,
}

impl ControllerCert {
    /// The certificate to present at `now`, renewed with `ca` if due.
    pub fn get(&self, ca: &HostCa, now: SystemTime) -> Result<Arc<CertifiedKey>, TlsError> {
        if let Ok(c) = self.current.read() {
            if let Some((ck, got, end)) = c.as_ref() {
                if !renewal_due(*got, *end, now) {
                    return Ok(ck.clone());
                }
            }
        }
        let (ck, end) = ca.sign_controller(now)?;
        if let Ok(mut c) = self.current.write() {
            *c = Some((ck.clone(), now, end));
        }
        Ok(ck)
    }
}

/// Presents one fixed certificate to every server that asks.
#[derive(Debug)]
struct Presents(Arc<CertifiedKey>);

impl ResolvesClientCert for Presents {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

fn roots_of(
    certs: impl IntoIterator<Item = CertificateDer<'static>>,
) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for c in certs {
        roots
            .add(c)
            .map_err(|e| TlsError::Certificate(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(TlsError::Certificate(
            "no certificate in the hosts' CA".into(),
        ));
    }
    Ok(roots)
}

fn pem_certs(pem: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Certificate(e.to_string()))
}

/// Which client certificates a TLS server of Sluice accepts: none required,
/// but one presented must chain to the hosts' CA (and be meant for a
/// client). Until the CA is known ([`ClientTrust::set_roots`]: an agent
/// learns it with its own certificate) every presented certificate is
/// refused. Who the client is, the terminator tells the server behind it
/// ([`crate::peer`]).
#[derive(Debug, Default)]
pub struct ClientTrust {
    inner: RwLock<Option<Arc<dyn ClientCertVerifier>>>,
}

impl ClientTrust {
    /// Trusting the CA certificates in `pem` (the hosts' CA).
    pub fn with_ca(pem: &str) -> Result<ClientTrust, TlsError> {
        let t = ClientTrust::default();
        t.set_roots(pem_certs(pem)?)?;
        Ok(t)
    }

    /// Trusts `certs` (the hosts' CA) from the next handshake on.
    pub fn set_roots(
        &self,
        certs: impl IntoIterator<Item = CertificateDer<'static>>,
    ) -> Result<(), TlsError> {
        let v = WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots_of(certs)?),
            crate::provider(),
        )
        .allow_unauthenticated()
        .build()
        .map_err(|e| TlsError::Certificate(e.to_string()))?;
        if let Ok(mut i) = self.inner.write() {
            *i = Some(v);
        }
        Ok(())
    }

    fn current(&self) -> Option<Arc<dyn ClientCertVerifier>> {
        self.inner.read().ok().and_then(|i| i.clone())
    }
}

impl ClientCertVerifier for ClientTrust {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        match self.current() {
            Some(v) => v.verify_client_cert(end_entity, intermediates, now),
            None => Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer,
            )),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &crate::provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &crate::provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        crate::provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A client configuration that trusts `ca_pem` only and accepts a
/// certificate only if it names [`host_name`]`(host)`, whatever name or
/// address the URL used.
/// It presents no client certificate: an agent answers it monitoring reads
/// only (see [`mutual_client_config`]).
pub fn client_config(ca_pem: &str, host: u32) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    mutual_client_config(ca_pem, host, None)
}

/// [`client_config`], presenting `client` (the controller's certificate,
/// [`ControllerCert`]) if given.
pub fn mutual_client_config(
    ca_pem: &str,
    host: u32,
    client: Option<Arc<CertifiedKey>>,
) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let roots = roots_of(pem_certs(ca_pem)?)?;
    let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), crate::provider())
        .build()
        .map_err(|e| TlsError::Certificate(e.to_string()))?;
    let name =
        ServerName::try_from(host_name(host)).map_err(|e| TlsError::Certificate(e.to_string()))?;
    let verifier = HostVerifier { inner, name };
    let builder = rustls::ClientConfig::builder_with_provider(crate::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Certificate(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier));
    let config = match client {
        Some(ck) => builder.with_client_cert_resolver(Arc::new(Presents(ck))),
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// webpki's verification against a fixed name instead of the URL's.
#[derive(Debug)]
struct HostVerifier {
    inner: Arc<WebPkiServerVerifier>,
    name: ServerName<'static>,
}

impl ServerCertVerifier for HostVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner
            .verify_server_cert(end_entity, intermediates, &self.name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// An agent's key pair and the certificate request it sends.
pub struct AgentKey {
    key: KeyPair,
    csr: String,
}

impl std::fmt::Debug for AgentKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentKey").finish_non_exhaustive()
    }
}

impl AgentKey {
    /// A new key pair (ECDSA P-256) and a request for host `host`'s name.
    pub fn generate(host: u32) -> Result<AgentKey, TlsError> {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(gen("the agent's key"))?;
        let params =
            CertificateParams::new(vec![host_name(host)]).map_err(gen("a certificate request"))?;
        let csr = params
            .serialize_request(&key)
            .and_then(|r| r.pem())
            .map_err(gen("a certificate request"))?;
        Ok(AgentKey { key, csr })
    }

    /// A key saved with [`AgentKey::key_pem`] (its request is made anew).
    pub fn from_pem(host: u32, pem: &str) -> Result<AgentKey, TlsError> {
        let key = KeyPair::from_pem(pem).map_err(|e| TlsError::Certificate(e.to_string()))?;
        let params =
            CertificateParams::new(vec![host_name(host)]).map_err(gen("a certificate request"))?;
        let csr = params
            .serialize_request(&key)
            .and_then(|r| r.pem())
            .map_err(gen("a certificate request"))?;
        Ok(AgentKey { key, csr })
    }

    /// The private key (PEM), to keep with the certificate.
    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// The certificate request (PEM).
    pub fn csr(&self) -> &str {
        &self.csr
    }

    /// The chain the controller returned, with this key, as rustls serves it.
    /// A chain whose certificate is for another key is refused.
    pub fn certified(&self, chain_pem: &str) -> Result<Arc<CertifiedKey>, TlsError> {
        let chain = pem_certs(chain_pem)?;
        if chain.is_empty() {
            return Err(TlsError::Certificate("no certificate in the answer".into()));
        }
        certified_key(chain, &self.key)
    }
}

/// The certificate an agent's TLS server presents; empty until the controller
/// signed one (handshakes fail until then, and the controller retries), and
/// replaced in place on renewal.
/// The agent presents the same certificate as a client to the controller.
#[derive(Debug, Default)]
pub struct CertSlot {
    current: RwLock<Option<Arc<CertifiedKey>>>,
    /// How many certificates were installed (a client must not resume a
    /// session, or reuse a connection, made with an older one).
    generation: std::sync::atomic::AtomicU64,
}

impl CertSlot {
    /// Presents `ck` from the next handshake on.
    pub fn set(&self, ck: Arc<CertifiedKey>) {
        if let Ok(mut c) = self.current.write() {
            *c = Some(ck);
            self.generation
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        }
    }

    /// Whether a certificate is installed.
    pub fn is_set(&self) -> bool {
        self.current.read().map(|c| c.is_some()).unwrap_or(false)
    }

    /// How many certificates were installed so far.
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    fn get(&self) -> Option<Arc<CertifiedKey>> {
        self.current.read().ok().and_then(|c| c.clone())
    }
}

impl ResolvesServerCert for CertSlot {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.get()
    }
}

impl ResolvesClientCert for CertSlot {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        self.get()
    }

    fn has_certs(&self) -> bool {
        self.is_set()
    }
}

/// A server configuration presenting whatever `slot` holds, and accepting
/// the client certificates `trust` does.
pub fn server_config(
    slot: Arc<CertSlot>,
    trust: Arc<ClientTrust>,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let config = rustls::ServerConfig::builder_with_provider(crate::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Certificate(e.to_string()))?
        .with_client_cert_verifier(trust)
        .with_cert_resolver(slot);
    Ok(Arc::new(config))
}

/// Whether a certificate received at `got` and valid until `not_after` should
/// be renewed at `now`: once half of what was left at `got` has passed.
pub fn renewal_due(got: SystemTime, not_after: SystemTime, now: SystemTime) -> bool {
    let left = not_after.duration_since(got).unwrap_or_default();
    now >= got + left / 2
}

#[cfg(test)]
mod tests;
