//! The client against real etcd members (Debian's `etcd-server`), over
//! mutual TLS.

use std::time::Duration;

use sluice_etcd::server::{etcd_binary, EtcdCluster};
use sluice_etcd::{Client, ClientTls, Compare, Op, Txn};

fn cluster(n: usize) -> Option<EtcdCluster> {
    if etcd_binary().is_none() {
        eprintln!("skipped: etcd is not installed (apt-get install etcd-server)");
        return None;
    }
    Some(EtcdCluster::start(n).expect("etcd starts"))
}

#[test]
fn ranges_transactions_and_leases_on_one_member() {
    let Some(c) = cluster(1) else { return };
    let e = c.client().unwrap();
    e.put(b"/t/a", b"1").unwrap();
    e.put(b"/t/b", b"2").unwrap();
    e.put(b"/u", b"3").unwrap();
    let got: Vec<(Vec<u8>, Vec<u8>)> = e
        .get_prefix(b"/t/")
        .unwrap()
        .into_iter()
        .map(|kv| (kv.key, kv.value))
        .collect();
    assert_eq!(
        got,
        vec![
            (b"/t/a".to_vec(), b"1".to_vec()),
            (b"/t/b".to_vec(), b"2".to_vec())
        ]
    );
    assert!(e.get(b"/nothing").unwrap().is_none());

    // Create-if-absent: the first wins, the second finds the winner.
    let lease = e.lease_grant(5).unwrap();
    let claim = |value: &[u8], lease| Txn {
        compare: vec![Compare::CreateRevision(b"/leader".to_vec(), 0)],
        success: vec![Op::Put {
            key: b"/leader".to_vec(),
            value: value.to_vec(),
            lease,
        }],
        failure: vec![Op::Get(b"/leader".to_vec())],
    };
    let won = e.txn(&claim(b"one", lease)).unwrap();
    assert!(won.succeeded);
    let lost = e.txn(&claim(b"two", 0)).unwrap();
    assert!(!lost.succeeded);
    assert_eq!(lost.gets[0][0].value, b"one".to_vec());
    assert_eq!(lost.gets[0][0].lease, lease);

    // A guarded write applies only while the guard holds.
    let rev = lost.gets[0][0].create_revision;
    let guarded = |value: &[u8]| Txn {
        compare: vec![Compare::CreateRevision(b"/leader".to_vec(), rev)],
        success: vec![Op::Put {
            key: b"/t/a".to_vec(),
            value: value.to_vec(),
            lease: 0,
        }],
        failure: vec![],
    };
    assert!(e.txn(&guarded(b"guarded")).unwrap().succeeded);
    assert_eq!(e.get(b"/t/a").unwrap().unwrap().value, b"guarded".to_vec());

    // Keepalive renews; revocation deletes the lease's keys, and the guard
    // then fails.
    assert!(e.lease_keepalive(lease).unwrap().is_some());
    e.lease_revoke(lease).unwrap();
    assert!(e.lease_keepalive(lease).unwrap().is_none());
    assert!(e.get(b"/leader").unwrap().is_none());
    assert!(!e.txn(&guarded(b"late")).unwrap().succeeded);
    assert_eq!(e.get(b"/t/a").unwrap().unwrap().value, b"guarded".to_vec());

    // Prefix deletion and value comparison.
    let t = Txn {
        compare: vec![Compare::Value(b"/u".to_vec(), b"3".to_vec())],
        success: vec![Op::DeletePrefix(b"/t/".to_vec())],
        failure: vec![],
    };
    assert!(e.txn(&t).unwrap().succeeded);
    assert!(e.get_prefix(b"/t/").unwrap().is_empty());
    assert!(e.get(b"/u").unwrap().is_some());
}

#[test]
fn a_client_without_the_clusters_certificate_is_refused() {
    let Some(c) = cluster(1) else { return };
    // Its own CA's client certificate: the member does not know it.
    let other = tempfile::tempdir().unwrap();
    let pki =
        sluice_tls::pki::PrivatePki::create(other.path(), "x", "Other", &["127.0.0.1"]).unwrap();
    let stranger = Client::new(
        &c.endpoints(),
        Some(&ClientTls {
            ca: c.client_tls().ca,
            cert: pki.client_cert,
            key: pki.client_key,
        }),
        Duration::from_secs(2),
    )
    .unwrap();
    let e = stranger.put(b"/x", b"1").unwrap_err().to_string();
    assert!(e.contains("no etcd member answered"), "{e}");
    // Plain HTTP is not served either.
    let plain = Client::new(
        &c.endpoints()
            .iter()
            .map(|u| u.replace("https://", "http://"))
            .collect::<Vec<_>>(),
        None,
        Duration::from_secs(2),
    )
    .unwrap();
    assert!(plain.put(b"/x", b"1").is_err());
    assert!(c.client().unwrap().get(b"/x").unwrap().is_none());
}

#[test]
fn three_members_serve_with_one_dead_and_the_client_moves_on() {
    let Some(mut c) = cluster(3) else { return };
    let e = c.client().unwrap();
    e.put(b"/k", b"before").unwrap();
    // Kill the member the client talks to (the first), then another. A
    // write waits for the survivors to elect a leader if the dead one led,
    // which a loaded machine can stretch past one request's 2 s: the client
    // is asked again, within a deadline (a safety net, not a timing claim).
    let put = |what: &[u8]| {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            match e.put(b"/k", what) {
                Ok(()) => return,
                Err(_) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(err) => panic!("no member took the write within 20 s: {err}"),
            }
        }
    };
    c.kill(0);
    put(b"after");
    assert_eq!(e.get(b"/k").unwrap().unwrap().value, b"after".to_vec());
    c.restart(0).unwrap();
    c.wait_serving(Duration::from_secs(20)).unwrap();
    c.kill(1);
    // Two of three still make a quorum.
    put(b"again");
    assert_eq!(e.get(b"/k").unwrap().unwrap().value, b"again".to_vec());
}
