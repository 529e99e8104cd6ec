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
//! The controller calls an agent with [`client_config`]: it trusts the hosts'
//! CA only and checks the certificate names the host it means to reach,
//! whatever address that host registered; a host token registers only its
//! own id, so a subverted host cannot obtain a certificate that answers for
//! another host.

use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType, PKCS_ECDSA_P256_SHA256,
};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, SignatureScheme};

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
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let cert = params
            .signed_by(&csr.public_key, &self.cert, &self.key)
            .map_err(gen("a host certificate"))?;
        Ok((format!("{}{}", cert.pem(), self.pem), not_after))
    }
}

/// A client configuration that trusts `ca_pem` only and accepts a
/// certificate only if it names [`host_name`]`(host)`, whatever name or
/// address the URL used.
pub fn client_config(ca_pem: &str, host: u32) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        let c = c.map_err(|e| TlsError::Certificate(e.to_string()))?;
        roots
            .add(c)
            .map_err(|e| TlsError::Certificate(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(TlsError::Certificate(
            "no certificate in the hosts' CA".into(),
        ));
    }
    let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), crate::provider())
        .build()
        .map_err(|e| TlsError::Certificate(e.to_string()))?;
    let name =
        ServerName::try_from(host_name(host)).map_err(|e| TlsError::Certificate(e.to_string()))?;
    let verifier = HostVerifier { inner, name };
    let config = rustls::ClientConfig::builder_with_provider(crate::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Certificate(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
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

    /// The certificate request (PEM).
    pub fn csr(&self) -> &str {
        &self.csr
    }

    /// The chain the controller returned, with this key, as rustls serves it.
    /// A chain whose certificate is for another key is refused.
    pub fn certified(&self, chain_pem: &str) -> Result<Arc<CertifiedKey>, TlsError> {
        let chain = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::Certificate(e.to_string()))?;
        if chain.is_empty() {
            return Err(TlsError::Certificate("no certificate in the answer".into()));
        }
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key.serialize_der()));
        let signer = crate::provider()
            .key_provider
            .load_private_key(der)
            .map_err(|e| TlsError::Certificate(e.to_string()))?;
        let ck = CertifiedKey::new(chain, signer);
        ck.keys_match()
            .map_err(|e| TlsError::Certificate(e.to_string()))?;
        Ok(Arc::new(ck))
    }
}

/// The certificate an agent's TLS server presents; empty until the controller
/// signed one (handshakes fail until then, and the controller retries), and
/// replaced in place on renewal.
#[derive(Debug, Default)]
pub struct CertSlot {
    current: RwLock<Option<Arc<CertifiedKey>>>,
}

impl CertSlot {
    /// Presents `ck` from the next handshake on.
    pub fn set(&self, ck: Arc<CertifiedKey>) {
        if let Ok(mut c) = self.current.write() {
            *c = Some(ck);
        }
    }

    /// Whether a certificate is installed.
    pub fn is_set(&self) -> bool {
        self.current.read().map(|c| c.is_some()).unwrap_or(false)
    }
}

impl ResolvesServerCert for CertSlot {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().ok().and_then(|c| c.clone())
    }
}

/// A server configuration presenting whatever `slot` holds.
pub fn server_config(slot: Arc<CertSlot>) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let config = rustls::ServerConfig::builder_with_provider(crate::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Certificate(e.to_string()))?
        .with_no_client_auth()
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
