//! TLS on the controller's API: the certificate (an operator's, or a private
//! CA and a server certificate created at first start), served by
//! [`sluice_tls::terminator`]; and the hosts' CA that signs the agents' API
//! certificates ([`sluice_tls::hosts`]), kept next to the database.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::service::Shared;

/// How the controller gets its certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// The operator's certificate chain (PEM) and private key (PEM); `None`:
    /// the controller's own CA and server certificate, next to the database.
    pub cert: Option<(PathBuf, PathBuf)>,
    /// Names and addresses the generated server certificate is also valid for,
    /// beyond the listen address, `127.0.0.1` and `localhost`.
    pub sans: Vec<String>,
}

/// TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate or key file could not be read, written or parsed.
    #[error("{path}: {msg}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        msg: String,
    },
    /// The certificate could not be generated.
    #[error("cannot generate the controller's certificate: {0}")]
    Generate(String),
    /// The hosts' CA could not be created or read.
    #[error("the hosts' CA: {0}")]
    Hosts(#[from] sluice_tls::hosts::TlsError),
    /// rustls refused the certificate and key.
    #[error("certificate {cert} with key {key}: {msg}")]
    Config {
        /// The certificate chain file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// Why.
        msg: String,
    },
}

/// The files of a generated certificate, next to the database (`DB.ca.pem`,
/// `DB.tls.pem`, `DB.tls.key`; in the working directory for `:memory:`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratedFiles {
    /// The private CA's certificate: what clients trust (mode 0644).
    pub ca: PathBuf,
    /// The server's certificate chain (server certificate, then the CA).
    pub cert: PathBuf,
    /// The server's private key (mode 0600).
    pub key: PathBuf,
}

impl GeneratedFiles {
    /// Where the certificate of the controller with database `db` goes.
    pub fn for_db(db: &Path) -> GeneratedFiles {
        let base = if db.as_os_str() == ":memory:" {
            PathBuf::from("sluice-controller.db")
        } else {
            db.to_path_buf()
        };
        GeneratedFiles {
            ca: base.with_extension("ca.pem"),
            cert: base.with_extension("tls.pem"),
            key: base.with_extension("tls.key"),
        }
    }
}

/// Where the hosts' CA of the controller with database `db` is kept
/// (certificate, key); `None` for `:memory:`, whose CA lives as long as the
/// process, like the rest of its state.
pub fn hosts_ca_files(db: &Path) -> Option<(PathBuf, PathBuf)> {
    (db.as_os_str() != ":memory:").then(|| {
        (
            db.with_extension("hosts-ca.pem"),
            db.with_extension("hosts-ca.key"),
        )
    })
}

/// The hosts' CA of the controller with database `db`, created at its first
/// start.
pub(crate) fn hosts_ca(db: &Path) -> Result<sluice_tls::hosts::HostCa, TlsError> {
    use sluice_tls::hosts::HostCa;
    Ok(match hosts_ca_files(db) {
        Some((cert, key)) => HostCa::load_or_create(&cert, &key)?,
        None => HostCa::generate()?,
    })
}

/// The server's TLS configuration, the CA file clients should trust if the
/// controller made its own, and what reloads its certificate.
pub(crate) struct Prepared {
    pub(crate) config: Arc<rustls::ServerConfig>,
    pub(crate) ca_file: Option<PathBuf>,
    pub(crate) reload: CertReload,
}

/// The controller's certificate, reloaded from its files when they change: an
/// operator rotates it by replacing the certificate and key files (their own
/// PKI's, or the generated ones); new connections get the new certificate, and
/// no connection or client is interrupted. A pair that does not load (a key
/// for another certificate, a file half-written) is refused, naming why, and
/// the certificate served so far stays.
pub(crate) struct CertReload {
    slot: Arc<sluice_tls::hosts::CertSlot>,
    cert: PathBuf,
    key: PathBuf,
    seen: std::sync::Mutex<(Option<std::time::SystemTime>, Option<std::time::SystemTime>)>,
}

fn modified(p: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

impl CertReload {
    /// Loads the files again if either changed since they were last looked
    /// at: `Ok(true)` if the new certificate is served from now on.
    pub(crate) fn check(&self) -> Result<bool, TlsError> {
        let now = (modified(&self.cert), modified(&self.key));
        {
            let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            if *seen == now {
                return Ok(false);
            }
            *seen = now;
        }
        self.slot.set(load_pair(&self.cert, &self.key)?);
        Ok(true)
    }
}

/// The certificate chain in `cert` with the private key in `key`, checked to
/// belong together.
fn load_pair(cert: &Path, key: &Path) -> Result<Arc<rustls::sign::CertifiedKey>, TlsError> {
    let chain = read_certs(cert)?;
    let private = PrivateKeyDer::from_pem_file(key).map_err(|e| file_err(key, e))?;
    rustls::sign::CertifiedKey::from_der(chain, private, &provider())
        .map(Arc::new)
        .map_err(|e| TlsError::Config {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            msg: e.to_string(),
        })
}

fn file_err(path: &Path, e: impl std::fmt::Display) -> TlsError {
    TlsError::File {
        path: path.to_path_buf(),
        msg: e.to_string(),
    }
}

/// The names a generated certificate is valid for: the listen address (unless
/// unspecified), `127.0.0.1`, `localhost` and `extra`, without duplicates.
pub fn subject_names(listen: IpAddr, extra: &[String]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut add = |n: String| {
        if !n.is_empty() && !names.contains(&n) {
            names.push(n);
        }
    };
    if !listen.is_unspecified() {
        add(listen.to_string());
    }
    add(Ipv4Addr::LOCALHOST.to_string());
    add("localhost".to_string());
    for n in extra {
        add(n.trim().to_string());
    }
    names
}

/// Creates a private CA and a server certificate it signs for `names`
/// (ECDSA P-256) in `files`, unless the certificate and key are there already
/// (then they are reused as they are: delete them to make new ones). Returns
/// whether it created them.
pub fn ensure_generated(files: &GeneratedFiles, names: &[String]) -> Result<bool, TlsError> {
    if files.cert.exists() && files.key.exists() {
        return Ok(false);
    }
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
    };
    let gen = |e: rcgen::Error| TlsError::Generate(e.to_string());
    let ca_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(gen)?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(gen)?;
    ca.distinguished_name
        .push(DnType::CommonName, "Sluice controller CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key).map_err(gen)?;
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(gen)?;
    let mut params = CertificateParams::new(names.to_vec()).map_err(gen)?;
    params
        .distinguished_name
        .push(DnType::CommonName, "Sluice controller");
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    let cert = params.signed_by(&key, &ca_cert, &ca_key).map_err(gen)?;
    // The key first: a chain without its key would be reused and never work.
    write_file(&files.key, &key.serialize_pem(), 0o600)?;
    write_file(&files.ca, &ca_cert.pem(), 0o644)?;
    write_file(
        &files.cert,
        &format!("{}{}", cert.pem(), ca_cert.pem()),
        0o644,
    )?;
    // The CA's key is dropped here: nothing else can be signed with it.
    Ok(true)
}

/// Writes `text` to `path` with `mode` (narrowing an existing file too).
fn write_file(path: &Path, text: &str, mode: u32) -> Result<(), TlsError> {
    sluice_tls::write_file(path, text, mode).map_err(|e| file_err(path, e))
}

/// The certificates in a PEM file (none: an error naming the file).
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_err(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_err(path, e))?;
    if certs.is_empty() {
        return Err(file_err(path, "no PEM certificate in it"));
    }
    Ok(certs)
}

/// The rustls provider everything here uses (ring, as the fabric does).
pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    sluice_tls::provider()
}

/// The server's configuration from `opts`, generating the certificate if the
/// operator gave none. Clients may present a certificate of the hosts' CA
/// (`hosts_ca`, PEM): agents do, and are then known by it; others (the CLI,
/// monitoring) present none and authenticate with their tokens.
pub(crate) fn prepare(
    db: &Path,
    listen: IpAddr,
    opts: &TlsOptions,
    hosts_ca: &str,
) -> Result<Prepared, TlsError> {
    let (cert, key, ca_file) = match &opts.cert {
        Some((c, k)) => (c.clone(), k.clone(), None),
        None => {
            let files = GeneratedFiles::for_db(db);
            ensure_generated(&files, &subject_names(listen, &opts.sans))?;
            (files.cert, files.key, Some(files.ca))
        }
    };
    let slot = Arc::new(sluice_tls::hosts::CertSlot::default());
    let reload = CertReload {
        slot: slot.clone(),
        cert: cert.clone(),
        key: key.clone(),
        seen: std::sync::Mutex::new((None, None)),
    };
    // The first load's errors stop the start: there is nothing to serve yet.
    reload.check()?;
    let trust = sluice_tls::hosts::ClientTrust::with_ca(hosts_ca)?;
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config {
            cert: cert.clone(),
            key: key.clone(),
            msg: e.to_string(),
        })?
        .with_client_cert_verifier(Arc::new(trust))
        .with_cert_resolver(slot);
    Ok(Prepared {
        config: Arc::new(config),
        ca_file,
        reload,
    })
}

/// The answer to plain HTTP on the TLS port, naming the fix.
pub(crate) const PLAIN_HTTP_ANSWER: &str = "{\"status\":400,\"title\":\"Bad Request\",\"detail\":\"this port speaks TLS: use an https:// URL (and trust the controller's CA: --ca-file or SLUICE_CA_FILE, ca_file in a CLI context or in the agent's configuration)\"}";

impl sluice_tls::terminator::Stopping for Shared {
    fn stopping(&self) -> bool {
        Shared::stopping(self)
    }
}

/// Binds the public TLS listener.
pub(crate) fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr)
}
#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn names_of(pem: &Path) -> Vec<String> {
        // The SANs as they appear in the DER: enough to see each name is there.
        let der = read_certs(pem).unwrap().remove(0);
        let bytes = der.as_ref().to_vec();
        let mut found = Vec::new();
        for n in ["127.0.0.1", "localhost", "10.0.0.5", "ctl.example"] {
            let hit = match n.parse::<IpAddr>() {
                Ok(IpAddr::V4(ip)) => bytes.windows(4).any(|w| w == ip.octets()),
                _ => bytes.windows(n.len()).any(|w| w == n.as_bytes()),
            };
            if hit {
                found.push(n.to_string());
            }
        }
        found
    }

    #[test]
    fn generated_certificates_name_the_addresses_and_keep_the_key_private() {
        let dir = tempfile::tempdir().unwrap();
        let files = GeneratedFiles::for_db(&dir.path().join("c.db"));
        assert_eq!(files.key, dir.path().join("c.tls.key"));
        let names = subject_names("10.0.0.5".parse().unwrap(), &["ctl.example".into()]);
        assert!(ensure_generated(&files, &names).unwrap());
        assert_eq!(
            names_of(&files.cert),
            ["127.0.0.1", "localhost", "10.0.0.5", "ctl.example"]
        );
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&files.key), 0o600);
        assert_eq!(mode(&files.ca), 0o644);
        // The chain is the server certificate and then the CA.
        let chain = read_certs(&files.cert).unwrap();
        assert_eq!(chain.len(), 2);
        assert_eq!(chain[1], read_certs(&files.ca).unwrap()[0]);
        // rustls accepts them.
        let opts = TlsOptions::default();
        let hosts = sluice_tls::hosts::HostCa::generate().unwrap();
        let db = dir.path().join("c.db");
        assert!(prepare(&db, "10.0.0.5".parse().unwrap(), &opts, hosts.pem()).is_ok());
    }

    #[test]
    fn a_restart_reuses_the_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let files = GeneratedFiles::for_db(&dir.path().join("c.db"));
        let names = subject_names("127.0.0.1".parse().unwrap(), &[]);
        assert!(ensure_generated(&files, &names).unwrap());
        let before = std::fs::read(&files.cert).unwrap();
        let ca = std::fs::read(&files.ca).unwrap();
        assert!(!ensure_generated(&files, &names).unwrap());
        assert_eq!(std::fs::read(&files.cert).unwrap(), before);
        assert_eq!(std::fs::read(&files.ca).unwrap(), ca);
    }

    #[test]
    fn subject_names_skip_an_unspecified_address_and_duplicates() {
        let n = subject_names(
            "0.0.0.0".parse().unwrap(),
            &["localhost".into(), " a.b ".into()],
        );
        assert_eq!(n, ["127.0.0.1", "localhost", "a.b"]);
    }

    #[test]
    fn an_operator_file_without_a_certificate_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("empty.pem");
        std::fs::write(&p, "nothing\n").unwrap();
        let e = read_certs(&p).unwrap_err().to_string();
        assert!(
            e.contains("empty.pem") && e.contains("no PEM certificate"),
            "{e}"
        );
    }
}
