//! Suricata's legacy TLS keywords ([`sluice_ips::tls::legacy`]): the
//! server certificate's `tls.subject`, `tls.issuerdn`, `tls.fingerprint`,
//! validity keywords, and the handshake state's `ssl_state` and
//! `ssl_version`, over whole handshakes whose segments each get the other
//! side's acknowledgement (as on the wire), in one batch and one packet per
//! batch through the store. The expected alerts are those Suricata 7.0.10
//! raises on the same exchanges (the `app-tls-legacy-*` Scapy tests).

use sluice_ips::rules::{self, RuleSyntax};
use sluice_ips::Ips;
use sluice_state::LocalStore;
use sluice_wire::build::tcp_v4;
use sluice_wire::tcp::flags::{ACK, PSH, SYN};

mod common;

const C: [u8; 4] = [10, 0, 0, 1];
const S: [u8; 4] = [192, 168, 1, 2];
/// November 2023, as nanoseconds.
const T0: u64 = 1_700_000_000_000_000_000;

fn vec_of(width: usize, body: &[u8]) -> Vec<u8> {
    let n = body.len() as u32;
    let mut v = n.to_be_bytes()[4 - width..].to_vec();
    v.extend_from_slice(body);
    v
}

fn msg(t: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![t];
    v.extend(vec_of(3, body));
    v
}

fn rec(ct: u8, version: u16, body: &[u8]) -> Vec<u8> {
    let mut v = vec![ct];
    v.extend(version.to_be_bytes());
    v.extend(vec_of(2, body));
    v
}

fn hello(t: u8, version: u16) -> Vec<u8> {
    let mut b = version.to_be_bytes().to_vec();
    b.extend([7u8; 32]);
    b.push(0);
    if t == 1 {
        b.extend(vec_of(2, &[0xc0, 0x2f]));
        b.extend([1, 0]);
    } else {
        b.extend([0xc0, 0x2f, 0]);
    }
    b.extend(vec_of(2, &[0xff, 0x01, 0, 1, 0]));
    msg(t, &b)
}

/// A certificate for `cn`, valid from `from` to `to` (years, 1 January).
fn cert(cn: &str, from: i32, to: i32) -> Vec<u8> {
    let mut p = rcgen::CertificateParams::default();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name
        .push(rcgen::DnType::OrganizationName, "Legacy");
    p.distinguished_name.push(rcgen::DnType::CommonName, cn);
    p.not_before = rcgen::date_time_ymd(from, 1, 1);
    p.not_after = rcgen::date_time_ymd(to, 1, 1);
    let key = rcgen::KeyPair::generate().unwrap();
    p.self_signed(&key).unwrap().der().to_vec()
}

/// A TLS 1.2 handshake (ECDHE when `skx`) and a record of data each way,
/// every segment acknowledged by the other side.
fn handshake(port: u16, der: &[u8], skx: bool) -> Vec<Vec<u8>> {
    let certs = msg(11, &vec_of(3, &vec_of(3, der)));
    let mut flight = [hello(2, 0x0303), certs].concat();
    if skx {
        flight.extend(msg(12, &[3, 0, 29, 4, 1, 2, 3, 4]));
    }
    flight.extend(msg(14, &[]));
    let ccs = rec(20, 0x0303, &[1]);
    let fin = rec(22, 0x0303, &[0x48; 40]);
    let segs: Vec<(bool, Vec<u8>)> = vec![
        (true, rec(22, 0x0301, &hello(1, 0x0303))),
        (false, rec(22, 0x0303, &flight)),
        (
            true,
            [
                rec(22, 0x0303, &msg(16, &[0x47; 33])),
                ccs.clone(),
                fin.clone(),
            ]
            .concat(),
        ),
        (false, [ccs, fin].concat()),
        (true, rec(23, 0x0303, &[0x49; 50])),
        (false, rec(23, 0x0303, &[0x4a; 50])),
    ];
    let mut f = vec![
        tcp_v4(C, S, 40000, port, 1000, 0, SYN, &[]),
        tcp_v4(S, C, port, 40000, 9000, 1001, SYN | ACK, &[]),
        tcp_v4(C, S, 40000, port, 1001, 9001, ACK, &[]),
    ];
    let (mut cs, mut ss) = (1001u32, 9001u32);
    for (to_server, d) in segs {
        if to_server {
            f.push(tcp_v4(C, S, 40000, port, cs, ss, ACK | PSH, &d));
            cs += d.len() as u32;
            f.push(tcp_v4(S, C, port, 40000, ss, cs, ACK, &[]));
        } else {
            f.push(tcp_v4(S, C, port, 40000, ss, cs, ACK | PSH, &d));
            ss += d.len() as u32;
            f.push(tcp_v4(C, S, 40000, port, cs, ss, ACK, &[]));
        }
    }
    f
}

fn ips(rules: &[String]) -> Ips {
    let r: Vec<&str> = rules.iter().map(String::as_str).collect();
    common::ips_with(&r, &[])
}

/// `opts` as TLS rules (sids from 1).
fn rules_of(opts: &[&str]) -> Vec<String> {
    opts.iter()
        .enumerate()
        .map(|(i, o)| format!("alert tls any any -> any any ({o} sid:{};)", i + 1))
        .collect()
}

/// How many alerts each rule raised, in one batch and one packet per batch
/// (through the store): both must agree.
fn counts(opts: &[&str], frames: &[Vec<u8>]) -> Vec<usize> {
    let rules = rules_of(opts);
    let (a, _) = common::run_in(&mut ips(&rules), &mut LocalStore::new(), frames, T0);
    let count = |sids: &[u32]| {
        (1..=opts.len() as u32)
            .map(|s| sids.iter().filter(|&&x| x == s).count())
            .collect::<Vec<_>>()
    };
    let one = count(&a.iter().map(|x| x.0).collect::<Vec<_>>());
    let mut ips = ips(&rules);
    let mut st = LocalStore::new();
    let mut each = Vec::new();
    for (k, f) in frames.iter().enumerate() {
        let (a, _) = common::run_in(
            &mut ips,
            &mut st,
            std::slice::from_ref(f),
            T0 + k as u64 * 1_000_000,
        );
        each.extend(a.into_iter().map(|x| x.0));
    }
    assert_eq!(one, count(&each), "one batch vs one packet per batch");
    one
}

fn load(opts: &str) -> Result<rules::Rule, RuleSyntax> {
    rules::parse_rule(
        &format!("alert tls any any -> any any ({opts} sid:1;)"),
        &rules::suricata_default_vars(),
    )
}

#[test]
fn ssl_state_sees_the_other_sides_last_message_once_per_direction() {
    let der = cert("evil.example", 2024, 2034);
    let mut frames = handshake(443, &der, true);
    let rsa = handshake(8443, &der, false);
    frames.extend(rsa);
    let opts = [
        "ssl_state:client_hello;",
        "flow:to_server; ssl_state:client_hello;",
        "ssl_state:server_hello;",
        "ssl_state:server_keyx;",
        "ssl_state:client_keyx;",
        "ssl_state:unknown;",
        "ssl_state:!unknown;",
        "ssl_state:!client_hello;",
        "ssl_state:client_hello|server_hello;",
        "ssl_state:client_keyx; ssl_version:tls1.2;",
        "flow:to_client; ssl_state:server_hello;",
    ];
    assert_eq!(counts(&opts, &frames), [2, 0, 1, 1, 2, 0, 4, 4, 3, 2, 0]);
}

#[test]
fn ssl_version_is_the_hellos_not_the_records() {
    let der = cert("evil.example", 2024, 2034);
    let frames = handshake(443, &der, true);
    let opts = [
        "ssl_version:tls1.2;",
        "flow:to_server; ssl_version:tls1.2;",
        "ssl_version:tls1.0;",
        "ssl_version:!tls1.0;",
        "ssl_version:tls1.1, TLS1.2;",
        "tls.cert_subject; content:\"evil\"; ssl_version:tls1.2;",
    ];
    assert_eq!(counts(&opts, &frames), [2, 1, 0, 0, 2, 1]);
}

#[test]
fn certificate_conditions() {
    let live = cert("evil.example", 2024, 2034);
    let old = cert("old.example", 2019, 2020);
    let mut frames = handshake(443, &live, true);
    frames.extend(handshake(8443, &old, true));
    let fp = {
        use sha1::Digest;
        let d = sha1::Sha1::digest(&live);
        d.iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    let f1 = format!("tls.fingerprint:\"{fp}\";");
    let f2 = format!("tls.fingerprint:\"{}\";", fp.to_uppercase());
    let f3 = format!("tls.fingerprint:!\"{fp}\";");
    let opts = [
        "tls.subject:\"CN=evil.example\";",
        "tls.subject:!\"CN=evil\";",
        "tls.issuerdn:\"O=Legacy\";",
        "tls.issuerdn:!\"O=Nobody\";",
        &f1,
        &f2,
        &f3,
        "tls_cert_notbefore:2024-01-01;",
        "tls_cert_notafter:<2021-01-01;",
        "tls_cert_notbefore:2018-12-31<>2019-01-02;",
        "tls_cert_expired;",
        "tls_cert_valid;",
        "tls_cert_expired; tls.subject:\"evil\";",
    ];
    assert_eq!(
        counts(&opts, &frames),
        [1, 1, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 0]
    );
}

#[test]
fn bad_values_are_refused_with_the_problem() {
    for bad in [
        "tls.subject:CN=x;",
        "tls.subject:\"a/b\";",
        "tls.issuerdn:\"\";",
        "tls.fingerprint:\"aa:bb\";",
        "tls.cert_fingerprint; content:\"aa:bb\";",
        "tls_cert_notbefore:12:30;",
        "tls_cert_notafter:2034-01-02<>2034-01-01;",
        "tls_cert_notafter:\"2034-01-01\";",
        "tls_cert_expired:x;",
        "ssl_version:tls1.0,!tls1.2;",
        "ssl_version:tls1.4;",
        "ssl_version:tls1.2,tls1.2;",
        "ssl_state:client_hello|;",
        "ssl_state:client_hello; content:\"x\";",
    ] {
        assert!(load(bad).is_err(), "{bad}");
    }
    let e = load("tls_cert_notbefore:2024-13-01;")
        .unwrap_err()
        .to_string();
    assert!(e.contains("2024-13-01"), "{e}");
    // Accepted, and what they make of the rule.
    assert!(load("tls.store; tls.subject:\"CN=a\";").is_ok());
    let r = rules::parse_rule(
        "alert tcp any any -> any any (tls_store; ssl_state:client_hello; sid:1;)",
        &rules::suricata_default_vars(),
    )
    .unwrap();
    assert!(r.tls_flow && r.proto == rules::Proto::Tls);
    assert!(
        !load("ssl_version:tls1.2; tls.sni; content:\"a\";")
            .unwrap()
            .tls_flow
    );
}

#[test]
fn old_records_decode_without_a_tls_state() {
    use sluice_ips::engine::FlowState;
    use sluice_state::{Codec, Reader, Writer};
    let mut s = FlowState::default();
    s.tls
        .feed(0, &rec(22, 0x0301, &hello(1, 0x0303))[..20], 0, false);
    let mut buf = Vec::new();
    s.encode(&mut Writer::new(&mut buf));
    let back = FlowState::decode(&mut Reader::new(&buf)).unwrap();
    assert_eq!(back.tls, s.tls);
    // Without one, the record ends where version 10 ended.
    let plain = FlowState::default();
    let mut buf = Vec::new();
    plain.encode(&mut Writer::new(&mut buf));
    assert_eq!(buf.len(), sluice_ips::engine::record_size(0));
    assert_eq!(FlowState::decode(&mut Reader::new(&buf)).unwrap(), plain);
}
