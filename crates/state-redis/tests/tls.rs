//! `rediss://` against a real redis-server (or valkey-server) serving TLS: the
//! store behaves as over plain TCP, and every way a connection can be wrong
//! (another CA, another name, the plain port, a required client certificate
//! missing) fails with an error that names it instead of hanging or being
//! accepted.

use std::net::TcpListener;
use std::path::PathBuf;

use sluice_state::{LocalStore, StateStore, StoreError};
use sluice_state_redis::server::{RedisServer, TlsFiles};
use sluice_state_redis::{ClusterStore, Config, RedisStore, Secret};

mod common;
use common::scenario;

/// A directory removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("sluice-tls-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A server with its plain port (for the harness) and a TLS port serving a
/// certificate for 127.0.0.1 and localhost; `clients`: `tls-auth-clients`.
fn tls_server(dir: &Dir, clients: &str) -> Option<(RedisServer, u16, TlsFiles)> {
    sluice_state_redis::server::server_binary()?;
    let files = TlsFiles::create(&dir.0, &["127.0.0.1", "localhost"]).unwrap();
    let port = free_port();
    let args: Vec<String> = files
        .server_settings(port)
        .into_iter()
        // The plain port stays for the harness's readiness check.
        .filter(|(k, _)| *k != "port")
        .map(|(k, v)| {
            if k == "tls-auth-clients" {
                (k, clients.to_string())
            } else {
                (k, v)
            }
        })
        .flat_map(|(k, v)| [format!("--{k}"), v])
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let srv = RedisServer::start(&args).expect("start redis-server with TLS");
    Some((srv, port, files))
}

fn skip() {
    eprintln!("skipped: no redis-server or valkey-server");
}

fn open(url: &str) -> Result<RedisStore, StoreError> {
    RedisStore::open(url)
}

#[test]
fn a_store_over_tls_behaves_as_the_local_store_and_authenticates_inside_it() {
    let dir = Dir::new("same");
    let Some((mut srv, port, files)) = tls_server(&dir, "optional") else {
        return skip();
    };
    let url = format!("rediss://127.0.0.1:{port}?ca_file={}", files.ca.display());
    let mut store = open(&url).unwrap();
    assert_eq!(
        scenario(&mut store),
        scenario(&mut LocalStore::new()),
        "every operation answers over TLS as the reference store does"
    );
    assert!(store.describe().starts_with("rediss://127.0.0.1:"));
    // The DNS name in the certificate works as well as its address.
    let mut by_name = open(&format!(
        "rediss://localhost:{port}?ca_file={}",
        files.ca.display()
    ))
    .unwrap();
    sluice_state_redis::server::flushall(srv.port()).unwrap();
    assert_eq!(scenario(&mut by_name), scenario(&mut LocalStore::new()));

    // ACL users over TLS: the password goes inside the encrypted stream.
    srv.secure("admin", &Secret::new("tls-admin-pw")).unwrap();
    let pw = dir.0.join("pw");
    std::fs::write(&pw, "tls-admin-pw\n").unwrap();
    let authed = format!(
        "rediss://admin@127.0.0.1:{port}?ca_file={}&password_file={}&prefix=authed.",
        files.ca.display(),
        pw.display()
    );
    let mut store = open(&authed).unwrap();
    assert_eq!(scenario(&mut store), scenario(&mut LocalStore::new()));
    std::fs::write(&pw, "wrong\n").unwrap();
    let e = open(&authed).err().expect("a wrong password is refused");
    assert!(e.to_string().contains("authentication"), "{e}");
}

#[test]
fn a_certificate_the_client_does_not_trust_is_refused_naming_why() {
    let dir = Dir::new("trust");
    let Some((_srv, port, _files)) = tls_server(&dir, "optional") else {
        return skip();
    };
    let other = Dir::new("trust-other");
    let stranger = TlsFiles::create(&other.0, &["127.0.0.1"]).unwrap();
    let e = open(&format!(
        "rediss://127.0.0.1:{port}?ca_file={}",
        stranger.ca.display()
    ))
    .err()
    .expect("another CA's certificate must not be accepted");
    assert!(matches!(e, StoreError::Refused(_)), "{e:?}");
    assert!(
        e.to_string()
            .contains("TLS handshake failed: invalid peer certificate"),
        "{e}"
    );

    // A name the certificate does not carry.
    let dir2 = Dir::new("trust-name");
    let Some((_srv2, port2, files2)) = tls_server(&dir2, "optional") else {
        return skip();
    };
    let e = open(&format!(
        "rediss://127.0.0.1:{port2}?ca_file={}&server_name=store.elsewhere.example",
        files2.ca.display()
    ))
    .err()
    .expect("a certificate for other names must not be accepted");
    assert!(e.to_string().contains("not valid for name"), "{e}");
}

#[test]
fn plain_and_tls_ports_do_not_mix_and_say_so() {
    let dir = Dir::new("mix");
    let Some((srv, port, files)) = tls_server(&dir, "optional") else {
        return skip();
    };
    // Plain RESP to the TLS port: the server hangs up on it; an error, not a hang.
    let e = open(&format!("redis://127.0.0.1:{port}"))
        .err()
        .expect("plain text to a TLS port must fail");
    assert!(
        matches!(e, StoreError::Unavailable(_) | StoreError::Timeout(_)),
        "{e:?}"
    );
    // TLS to the plain port.
    let e = open(&format!(
        "rediss://127.0.0.1:{}?ca_file={}",
        srv.port(),
        files.ca.display()
    ))
    .err()
    .expect("TLS to a plain port must fail");
    assert!(e.to_string().contains("TLS handshake failed"), "{e}");
}

#[test]
fn a_server_requiring_client_certificates_takes_only_clients_that_present_one() {
    let dir = Dir::new("mutual");
    let Some((_srv, port, files)) = tls_server(&dir, "yes") else {
        return skip();
    };
    let e = open(&format!(
        "rediss://127.0.0.1:{port}?ca_file={}",
        files.ca.display()
    ))
    .err()
    .expect("a client without a certificate must be refused");
    // TLS 1.3: the client's part of the handshake is done when the server
    // refuses, so the alert arrives with the first reply read.
    assert!(e.to_string().contains("CertificateRequired"), "{e}");
    let mut store = open(&format!(
        "rediss://127.0.0.1:{port}?ca_file={}&cert_file={}&key_file={}",
        files.ca.display(),
        files.client_cert.display(),
        files.client_key.display()
    ))
    .unwrap();
    assert_eq!(scenario(&mut store), scenario(&mut LocalStore::new()));
}

#[test]
fn tls_options_are_checked_before_anything_connects() {
    let cases = [
        (
            "redis://h:1?ca_file=/x",
            "ca_file is a TLS option: use rediss://",
        ),
        (
            "redis-cluster://h:1?server_name=n",
            "server_name is a TLS option: use rediss-cluster://",
        ),
        (
            "rediss://h:1?ca_file=/nonexistent/ca.pem",
            "ca_file /nonexistent/ca.pem",
        ),
        ("rediss://h:1?ca_file=", "ca_file is empty"),
        (
            "rediss://h:1?cert_file=/a",
            "cert_file and key_file go together",
        ),
        (
            "rediss://h:1?server_name=bad%20name",
            "server_name `bad%20name`",
        ),
        ("http://h:1", "expected a redis:// or rediss:// URL"),
    ];
    for (url, want) in cases {
        let e = if url.contains("-cluster://") {
            ClusterStore::open(url).err()
        } else {
            Config::from_url(url).err()
        };
        let e = e.unwrap_or_else(|| panic!("{url} accepted"));
        assert!(e.to_string().contains(want), "{url}: {e}");
    }
    let e = ClusterStore::open("rediss-cluster://h:1?cert_file=/a")
        .err()
        .expect("refused");
    assert!(e.to_string().contains("go together"), "{e}");
    // A file without a certificate in it is named too.
    let dir = Dir::new("opts");
    let junk = dir.0.join("junk.pem");
    std::fs::write(&junk, "not a certificate\n").unwrap();
    let e =
        Config::from_url(&format!("rediss://h:1?ca_file={}", junk.display())).expect_err("refused");
    assert!(e.to_string().contains("no PEM certificate"), "{e}");
}

/// A pipeline whose replies span many TLS records and more than the client's
/// ciphertext buffer: every answer arrives whole and in order.
#[test]
fn a_pipeline_larger_than_the_receive_buffer_answers_every_operation() {
    let dir = Dir::new("large");
    let Some((_srv, port, files)) = tls_server(&dir, "optional") else {
        return skip();
    };
    let url = format!("rediss://127.0.0.1:{port}?ca_file={}", files.ca.display());
    let mut store = open(&url).unwrap();
    let key = |i: u32| sluice_state::Key::new(sluice_state::Namespace(5), 1, &i.to_be_bytes());
    let value = |i: u32| vec![(i % 251) as u8; 300 + (i as usize % 700)];
    let mut ops = sluice_state::Ops::new();
    for i in 0..3000 {
        ops.put(key(i), &value(i));
    }
    store.execute(&mut ops).unwrap();
    let mut ops = sluice_state::Ops::new();
    let ids: Vec<_> = (0..3000).map(|i| ops.get(key(i))).collect();
    store.execute(&mut ops).unwrap();
    for (i, id) in ids.into_iter().enumerate() {
        assert_eq!(
            ops.value(id),
            Some(&value(i as u32)[..]),
            "the answer to get #{i}"
        );
    }
}
