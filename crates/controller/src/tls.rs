//! TLS on the controller's API: the certificate (an operator's, or a private
//! CA and a server certificate created at first start) and the terminator that
//! serves it.
//!
//! tiny_http's own `ssl-rustls` feature pins rustls 0.20 (RUSTSEC-2024-0336:
//! a peer can spin a thread forever), so the controller terminates TLS itself
//! with the rustls ureq already brings: each connection gets a thread that
//! runs the handshake and relays plaintext to the HTTP workers over a Unix
//! socket in a private directory.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// The server's TLS configuration, and the CA file clients should trust if
/// the controller made its own.
pub(crate) struct Prepared {
    pub(crate) config: Arc<rustls::ServerConfig>,
    pub(crate) ca_file: Option<PathBuf>,
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
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .map_err(|e| file_err(path, e))?;
    f.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(|e| file_err(path, e))?;
    f.write_all(text.as_bytes())
        .and_then(|_| f.sync_all())
        .map_err(|e| file_err(path, e))
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
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The server's configuration from `opts`, generating the certificate if the
/// operator gave none.
pub(crate) fn prepare(db: &Path, listen: IpAddr, opts: &TlsOptions) -> Result<Prepared, TlsError> {
    let (cert, key, ca_file) = match &opts.cert {
        Some((c, k)) => (c.clone(), k.clone(), None),
        None => {
            let files = GeneratedFiles::for_db(db);
            ensure_generated(&files, &subject_names(listen, &opts.sans))?;
            (files.cert, files.key, Some(files.ca))
        }
    };
    let chain = read_certs(&cert)?;
    let private = PrivateKeyDer::from_pem_file(&key).map_err(|e| file_err(&key, e))?;
    let bad = |msg: String| TlsError::Config {
        cert: cert.clone(),
        key: key.clone(),
        msg,
    };
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(|e| bad(e.to_string()))?;
    Ok(Prepared {
        config: Arc::new(config),
        ca_file,
    })
}

/// The listener the HTTP workers serve behind the terminator: a Unix socket
/// in a fresh directory only the controller's user can enter (removed when
/// the value is dropped).
pub(crate) struct Backend {
    dir: PathBuf,
    /// The socket's path.
    pub(crate) path: PathBuf,
}

impl Backend {
    /// A new directory under the system's temporary directory, with a random
    /// name, and the socket's listener in it.
    pub(crate) fn bind() -> std::io::Result<(Backend, UnixListener)> {
        use std::os::unix::fs::DirBuilderExt;
        let mut r = [0u8; 12];
        getrandom::getrandom(&mut r).map_err(|e| std::io::Error::other(e.to_string()))?;
        let name: String = r.iter().map(|b| format!("{b:02x}")).collect();
        let dir = std::env::temp_dir().join(format!("sluice-controller-{name}"));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let path = dir.join("http.sock");
        let backend = Backend { dir, path };
        let listener = UnixListener::bind(&backend.path)?;
        Ok((backend, listener))
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Most connections relayed at once; more are closed at once.
const MAX_CONNECTIONS: usize = 512;
/// A connection with nothing to relay for this long is closed.
const IDLE: Duration = Duration::from_secs(60);
/// How often waiting threads look at whether the server is stopping.
const STOP_CHECK: i32 = 100;

/// Accepts TLS connections on `listener` until the server stops, relaying
/// each to `backend` on a thread of its own.
pub(crate) fn acceptor(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
    backend: PathBuf,
    shared: Arc<Shared>,
) {
    let live = Arc::new(AtomicUsize::new(0));
    while !shared.stopping() {
        if !readable(listener.as_raw_fd(), STOP_CHECK) {
            continue;
        }
        let tcp = match listener.accept() {
            Ok((s, _)) => s,
            Err(_) => continue,
        };
        if live.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            live.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        let (config, backend, shared, live) = (
            config.clone(),
            backend.clone(),
            shared.clone(),
            live.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name("ctl-tls".into())
            .spawn(move || {
                // A failed connection concerns its client only.
                let _ = relay(tcp, config, &backend, &shared);
                live.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            // The closure (and its count) went with the failed spawn.
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Whether `fd` became readable (or closed) within `ms` milliseconds.
fn readable(fd: i32, ms: i32) -> bool {
    poll(&mut [pollfd(fd)], ms) > 0
}

fn pollfd(fd: i32) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

fn poll(fds: &mut [libc::pollfd], ms: i32) -> i32 {
    // SAFETY: `fds` is a valid, exclusively borrowed array of pollfd.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) }
}

/// The first byte of a TLS handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

/// The answer to plain HTTP on the TLS port, naming the fix.
const PLAIN_HTTP_ANSWER: &str = "{\"status\":400,\"title\":\"Bad Request\",\"detail\":\"this port speaks TLS: use an https:// URL (and trust the controller's CA: --ca-file or SLUICE_CA_FILE, ca_file in a CLI context or in the agent's configuration)\"}";

/// One connection: the handshake, then plaintext both ways until either side
/// closes or it is idle for [`IDLE`].
fn relay(
    mut tcp: TcpStream,
    config: Arc<rustls::ServerConfig>,
    backend: &Path,
    shared: &Shared,
) -> std::io::Result<()> {
    tcp.set_write_timeout(Some(Duration::from_secs(10)))?;
    tcp.set_nodelay(true)?;
    if !readable(tcp.as_raw_fd(), IDLE.as_millis() as i32) {
        return Ok(());
    }
    let mut first = [0u8; 1];
    if tcp.peek(&mut first)? == 1 && first[0] != TLS_HANDSHAKE {
        let answer = format!(
            "HTTP/1.1 400 Bad Request\r\nContent-Type: application/problem+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{PLAIN_HTTP_ANSWER}",
            PLAIN_HTTP_ANSWER.len()
        );
        return tcp.write_all(answer.as_bytes());
    }
    let mut tls = rustls::ServerConnection::new(config).map_err(std::io::Error::other)?;
    let mut back: Option<UnixStream> = None;
    let mut buf = vec![0u8; 16 * 1024];
    let mut last = Instant::now();
    let mut client_done = false;
    loop {
        while tls.wants_write() {
            tls.write_tls(&mut tcp)?;
        }
        if shared.stopping() || last.elapsed() > IDLE {
            return Ok(());
        }
        let mut fds = vec![pollfd(tcp.as_raw_fd())];
        if client_done {
            // Ignored by poll: a closed socket would report a hang-up forever.
            fds[0].fd = -1;
        }
        if let Some(b) = &back {
            fds.push(pollfd(b.as_raw_fd()));
        }
        if poll(&mut fds, STOP_CHECK) <= 0 {
            continue;
        }
        last = Instant::now();
        if fds[0].revents != 0 && !client_done {
            if tls.read_tls(&mut tcp)? == 0 {
                client_done = true;
            }
            if let Err(e) = tls.process_new_packets() {
                // Send the alert it queued, then give up.
                while tls.wants_write() {
                    tls.write_tls(&mut tcp)?;
                }
                return Err(std::io::Error::other(e));
            }
            // Plaintext may come in the same read as the handshake's end.
            if back.is_none() && !tls.is_handshaking() {
                back = Some(connect(backend)?);
            }
            loop {
                match tls.reader().read(&mut buf) {
                    Ok(0) => {
                        client_done = true;
                        break;
                    }
                    Ok(n) => match &mut back {
                        Some(b) => b.write_all(&buf[..n])?,
                        None => return Ok(()),
                    },
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                }
            }
            if client_done {
                if let Some(b) = &back {
                    b.shutdown(std::net::Shutdown::Write)?;
                } else {
                    return Ok(());
                }
            }
        }
        if let (Some(b), Some(f)) = (&mut back, fds.get(1)) {
            if f.revents != 0 {
                let n = b.read(&mut buf)?;
                if n == 0 {
                    tls.send_close_notify();
                    while tls.wants_write() {
                        tls.write_tls(&mut tcp)?;
                    }
                    return Ok(());
                }
                tls.writer().write_all(&buf[..n])?;
            }
        }
    }
}

fn connect(backend: &Path) -> std::io::Result<UnixStream> {
    let b = UnixStream::connect(backend)?;
    b.set_write_timeout(Some(Duration::from_secs(10)))?;
    Ok(b)
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
        assert!(prepare(&dir.path().join("c.db"), "10.0.0.5".parse().unwrap(), &opts).is_ok());
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
