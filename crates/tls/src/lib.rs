//! TLS shared by Sluice's controller and agents.
//!
//! * [`terminator`]: TLS in front of a tiny_http server on a private Unix
//!   socket (both the controller's and the agents' APIs are served this way).
//! * [`hosts`]: the hosts' CA. The controller signs each agent's API
//!   certificate from a certificate request the agent sends with its
//!   (token-authenticated, TLS-protected) registration, naming the host by its
//!   id; when it calls an agent it trusts that CA only and checks the name of
//!   the host it means to reach, so one host cannot answer for another. The
//!   same CA makes the controller's client certificate, and agents present
//!   theirs as client certificates to the controller: mutual TLS both ways.
//! * [`peer`]: how the terminator tells the server behind it who the client
//!   certificate names.
//! * [`pki`]: a private CA and certificates for the servers tests and the
//!   testbed start (Redis/Valkey, etcd).

pub mod hosts;
pub mod peer;
pub mod pki;
pub mod terminator;

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

/// The rustls provider everything here uses (ring, as the fabric does).
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Writes `text` to `path` with `mode` (narrowing an existing file too), and
/// syncs it.
pub fn write_file(path: &Path, text: &str, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)?;
    f.set_permissions(std::fs::Permissions::from_mode(mode))?;
    f.write_all(text.as_bytes())?;
    f.sync_all()
}
