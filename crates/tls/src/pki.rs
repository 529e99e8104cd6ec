//! A private CA with one server and one client certificate, as PEM files: what
//! tests and the testbed give the servers they start (Redis/Valkey, etcd) and
//! their clients. A deployment brings its own PKI.

use std::path::{Path, PathBuf};

/// The files [`PrivatePki::create`] writes.
#[derive(Debug, Clone)]
pub struct PrivatePki {
    /// The CA's certificate: what both ends trust.
    pub ca: PathBuf,
    /// The server's certificate (also valid as a client's: a cluster member
    /// presents it to its peers).
    pub cert: PathBuf,
    /// The server's key (mode 0600).
    pub key: PathBuf,
    /// A client certificate, for servers that require one.
    pub client_cert: PathBuf,
    /// Its key (mode 0600).
    pub client_key: PathBuf,
}

impl PrivatePki {
    /// Where [`PrivatePki::create`] puts the files of `stem` in `dir`
    /// (`STEM-ca.pem`, `STEM.pem`, `STEM.key`, `STEM-client.pem`,
    /// `STEM-client.key`); nothing is written.
    pub fn paths(dir: &Path, stem: &str) -> PrivatePki {
        PrivatePki {
            ca: dir.join(format!("{stem}-ca.pem")),
            cert: dir.join(format!("{stem}.pem")),
            key: dir.join(format!("{stem}.key")),
            client_cert: dir.join(format!("{stem}-client.pem")),
            client_key: dir.join(format!("{stem}-client.key")),
        }
    }

    /// Every file, for removal.
    pub fn all(&self) -> [PathBuf; 5] {
        [
            self.ca.clone(),
            self.cert.clone(),
            self.key.clone(),
            self.client_cert.clone(),
            self.client_key.clone(),
        ]
    }

    /// Makes a CA (common name `WHAT CA`) and the two certificates it signs
    /// (ECDSA P-256): the server's naming `names` (IP addresses or DNS
    /// names), the client's naming `STEM-client.sluice`. The CA's key is not
    /// kept: nothing else can be signed.
    pub fn create(
        dir: &Path,
        stem: &str,
        what: &str,
        names: &[&str],
    ) -> Result<PrivatePki, String> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
            KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
        };
        let gen = |e: rcgen::Error| format!("making the certificates of {what}: {e}");
        let ca_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(gen)?;
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(gen)?;
        ca.distinguished_name
            .push(DnType::CommonName, format!("{what} CA"));
        ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca.self_signed(&ca_key).map_err(gen)?;
        let leaf = |names: Vec<String>, cn: String| -> Result<(String, String), String> {
            let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(gen)?;
            let mut p = CertificateParams::new(names).map_err(gen)?;
            p.distinguished_name.push(DnType::CommonName, cn);
            p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
            p.extended_key_usages = vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ];
            p.use_authority_key_identifier_extension = true;
            let cert = p.signed_by(&key, &ca_cert, &ca_key).map_err(gen)?;
            Ok((cert.pem(), key.serialize_pem()))
        };
        let (cert, key) = leaf(names.iter().map(|n| n.to_string()).collect(), what.into())?;
        let (ccert, ckey) = leaf(
            vec![format!("{stem}-client.sluice")],
            format!("{what} client"),
        )?;
        let f = PrivatePki::paths(dir, stem);
        let write = |p: &Path, text: &str, mode| {
            crate::write_file(p, text, mode).map_err(|e| format!("{}: {e}", p.display()))
        };
        // Keys first: a certificate without its key would be useless.
        write(&f.key, &key, 0o600)?;
        write(&f.client_key, &ckey, 0o600)?;
        write(&f.ca, &ca_cert.pem(), 0o644)?;
        write(&f.cert, &cert, 0o644)?;
        write(&f.client_cert, &ccert, 0o644)?;
        Ok(f)
    }
}
