//! TLS: the hello parser (never panics), detection by content whatever the
//! ports, and rules of protocol `tls` with the `tls.sni`, `ja3.hash`,
//! `ja3.string`, `ja3s.hash` and `ja3s.string` sticky buffers, and the
//! server certificate's (`tls.certs`, `tls.cert_subject`, `tls.cert_issuer`,
//! `tls.cert_serial`). Hellos are built byte by byte here, certificates by
//! rcgen; the TCP/IP layers by `sluice_wire::build`.

use std::path::Path;

use proptest::prelude::*;
use sluice_ips::rules::{self, RuleSyntax};
use sluice_ips::tls::{self, Kind, TlsError};
use sluice_ips::Ips;
use sluice_nf::AlertAction;
use sluice_state::LocalStore;
use sluice_wire::build::tcp_v4;
use sluice_wire::tcp::flags::{ACK, PSH, SYN};

mod common;

const C: [u8; 4] = [10, 0, 0, 1];
const S: [u8; 4] = [192, 168, 1, 2];

fn u16s(v: &[u16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_be_bytes()).collect()
}

/// `body` after its length in `width` bytes.
fn vec_of(width: usize, body: &[u8]) -> Vec<u8> {
    let n = body.len() as u32;
    let mut v = n.to_be_bytes()[4 - width..].to_vec();
    v.extend_from_slice(body);
    v
}

fn ext(ty: u16, data: &[u8]) -> Vec<u8> {
    let mut v = ty.to_be_bytes().to_vec();
    v.extend(vec_of(2, data));
    v
}

fn sni(name: &str) -> Vec<u8> {
    let mut entry = vec![0];
    entry.extend(vec_of(2, name.as_bytes()));
    ext(0, &vec_of(2, &entry))
}

fn groups(g: &[u16]) -> Vec<u8> {
    ext(10, &vec_of(2, &u16s(g)))
}

fn formats(f: &[u8]) -> Vec<u8> {
    ext(11, &vec_of(1, f))
}

/// A handshake record holding one message of `hs_type` with `body`.
fn record(hs_type: u8, body: &[u8]) -> Vec<u8> {
    let mut hs = vec![hs_type];
    hs.extend(vec_of(3, body));
    let mut r = vec![22, 3, 1];
    r.extend(vec_of(2, &hs));
    r
}

/// A ClientHello record: `version`, a 32-byte session id, `ciphers`, null
/// compression, then `exts` (no extensions block if `None`).
fn client_hello(version: u16, ciphers: &[u16], exts: Option<&[Vec<u8>]>) -> Vec<u8> {
    let mut b = version.to_be_bytes().to_vec();
    b.extend([7u8; 32]); // random
    b.extend(vec_of(1, &[9u8; 32]));
    b.extend(vec_of(2, &u16s(ciphers)));
    b.extend([1, 0]);
    if let Some(e) = exts {
        b.extend(vec_of(2, &e.concat()));
    }
    record(1, &b)
}

/// A ServerHello record choosing `cipher`, with `exts`.
fn server_hello(version: u16, cipher: u16, exts: &[Vec<u8>]) -> Vec<u8> {
    let mut b = version.to_be_bytes().to_vec();
    b.extend([5u8; 32]);
    b.extend(vec_of(1, &[1u8; 32]));
    b.extend(cipher.to_be_bytes());
    b.push(0);
    b.extend(vec_of(2, &exts.concat()));
    record(2, &b)
}

/// A modern-looking hello for `name`: GREASE in ciphers, extensions and
/// groups, as browsers send.
fn browser_hello(name: &str) -> Vec<u8> {
    client_hello(
        0x0303,
        &[0x0a0a, 0x1301, 0xc02b],
        Some(&[
            ext(0x0a0a, &[]),
            sni(name),
            groups(&[0x1a1a, 29, 23]),
            formats(&[0]),
            ext(0xff01, &[0]),
        ]),
    )
}

/// The JA3 README's example: `769,47-53-5-10-49161-49162-49171-49172-50-56-19-4,0-10-11,23-24-25,0`.
fn ja3_readme_hello() -> Vec<u8> {
    client_hello(
        0x0301,
        &[47, 53, 5, 10, 49161, 49162, 49171, 49172, 50, 56, 19, 4],
        Some(&[sni("example.com"), groups(&[23, 24, 25]), formats(&[0])]),
    )
}

fn ips(rules: &[&str]) -> Ips {
    common::ips_with(
        rules,
        &[("HOME_NET", "10.0.0.0/8"), ("EXTERNAL_NET", "any")],
    )
}

/// A handshake from C to S on `port`, then `client` from the client and
/// `server` (if any) back.
fn flow(port: u16, client: &[Vec<u8>], server: Option<&[u8]>) -> Vec<Vec<u8>> {
    let mut frames = vec![
        tcp_v4(C, S, 40000, port, 1000, 0, SYN, &[]),
        tcp_v4(S, C, port, 40000, 9000, 1001, SYN | ACK, &[]),
        tcp_v4(C, S, 40000, port, 1001, 9001, ACK, &[]),
    ];
    let mut seq = 1001u32;
    for seg in client {
        frames.push(tcp_v4(C, S, 40000, port, seq, 9001, ACK | PSH, seg));
        seq += seg.len() as u32;
    }
    if let Some(s) = server {
        frames.push(tcp_v4(S, C, port, 40000, 9001, seq, ACK | PSH, s));
    }
    frames
}

/// Sids alerting when `frames` run as one batch.
fn sids(rules: &[&str], frames: &[Vec<u8>]) -> Vec<u32> {
    let (alerts, _) = common::run_in(
        &mut ips(rules),
        &mut LocalStore::new(),
        frames,
        1_000_000_000,
    );
    alerts.into_iter().map(|a| a.0).collect()
}

/// True if the options (`sid:1` added) of a `tls` rule fire on a client
/// hello `hello` to port 443.
fn fires(opts: &str, hello: Vec<u8>) -> bool {
    let rule = format!("alert tls any any -> any any ({opts} sid:1;)");
    sids(&[&rule], &flow(443, &[hello], None)) == vec![1]
}

fn load(rule: &str) -> Result<rules::Rule, RuleSyntax> {
    rules::parse_rule(rule, &rules::suricata_default_vars())
}

fn ja3_string(b: &[u8]) -> String {
    let h = tls::detect(b).unwrap();
    let mut s = Vec::new();
    h.write_ja3(b, &mut s);
    String::from_utf8(s).unwrap()
}

// --- the parser -----------------------------------------------------------

#[test]
fn parses_a_client_hello() {
    let b = browser_hello("www.example.com");
    let h = tls::detect(&b).unwrap();
    assert_eq!(h.kind, Kind::Client);
    assert_eq!(h.version, 0x0303);
    assert_eq!(&b[h.sni.clone().unwrap()], b"www.example.com");
    assert_eq!(&b[h.ciphers.clone()], &u16s(&[0x0a0a, 0x1301, 0xc02b])[..]);
    assert_eq!(&b[h.groups.clone()], &u16s(&[0x1a1a, 29, 23])[..]);
    assert_eq!(&b[h.formats.clone()], &[0]);
    let types: Vec<u16> = h.extension_types(&b).collect();
    assert_eq!(types, vec![0x0a0a, 0, 10, 11, 0xff01]);
}

#[test]
fn ja3_skips_grease_and_matches_the_published_example() {
    // Hand-derived: version 0x0303 = 771, 0x1301 = 4865, 0xc02b = 49195,
    // 0xff01 = 65281; every 0x?a?a value left out.
    assert_eq!(
        ja3_string(&browser_hello("a.example")),
        "771,4865-49195,0-10-11-65281,29-23,0"
    );
    assert_eq!(
        &tls::md5_hex(b"771,4865-49195,0-10-11-65281,29-23,0"),
        b"5263167369648b41652adeb120b69b16"
    );
    // The JA3 README's example string and its published MD5.
    let b = ja3_readme_hello();
    let s = ja3_string(&b);
    assert_eq!(
        s,
        "769,47-53-5-10-49161-49162-49171-49172-50-56-19-4,0-10-11,23-24-25,0"
    );
    assert_eq!(
        &tls::md5_hex(s.as_bytes()),
        b"ada70206e40642a3e4461f35503241d5"
    );
    // No extensions at all: empty fields, commas kept.
    let b = client_hello(0x0300, &[4, 5], None);
    assert_eq!(ja3_string(&b), "768,4-5,,,");
    assert!(tls::is_grease(0xfafa) && !tls::is_grease(0x0a1a) && !tls::is_grease(0x0a0b));
}

#[test]
fn ja3s_of_a_server_hello() {
    let b = server_hello(0x0303, 0xc02f, &[ext(0xff01, &[0]), ext(11, &[1, 0])]);
    let h = tls::detect(&b).unwrap();
    assert_eq!(h.kind, Kind::Server);
    assert!(h.sni.is_none());
    assert_eq!(ja3_string(&b), "771,49199,65281-11");
    // Coalesced with the Certificate in one record that goes on past the
    // segment: the hello is still whole.
    let mut co = b.clone();
    let hs_len = co.len() - 5;
    co[3..5].copy_from_slice(&((hs_len + 3000) as u16).to_be_bytes());
    co.extend_from_slice(&[11, 0, 0x0b, 0xb4, 0, 0x0b, 0xb1]);
    assert_eq!(ja3_string(&co), "771,49199,65281-11");
    // But a record shorter than its hello is refused.
    let mut short = b.clone();
    short[3..5].copy_from_slice(&((hs_len - 1) as u16).to_be_bytes());
    assert_eq!(
        tls::detect(&short),
        Err(TlsError::HelloLength(hs_len - 4, hs_len - 1))
    );
}

#[test]
fn refuses_what_is_not_a_whole_hello() {
    let good = browser_hello("a.example");
    assert_eq!(
        tls::detect(b"GET / HTTP/1.1\r\n"),
        Err(TlsError::ContentType(b'G'))
    );
    assert_eq!(tls::detect(&[22, 3]), Err(TlsError::Truncated(2)));
    let mut v2 = good.clone();
    v2[1] = 2;
    assert_eq!(tls::detect(&v2), Err(TlsError::Version(0x0201)));
    let mut fin = good.clone();
    fin[5] = 20;
    assert_eq!(tls::detect(&fin), Err(TlsError::HandshakeType(20)));
    // Every strict prefix is refused (a split hello is not recognised).
    for n in 0..good.len() {
        assert!(tls::detect(&good[..n]).is_err(), "{n}");
    }
    // Extensions whose block is longer than what follows.
    // The last extension (ff 01, length 00 01, data 00) claiming 5 bytes.
    let mut long = good.clone();
    let n = long.len();
    long[n - 2] = 5;
    assert_eq!(tls::detect(&long), Err(TlsError::Length(n - 3)));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = tls::detect(&b);
        let mut b2 = vec![22, 3, 1];
        b2.extend_from_slice(&b);
        if let Ok(h) = tls::detect(&b2) {
            let mut s = Vec::new();
            h.write_ja3(&b2, &mut s);
        }
    }

    #[test]
    fn mutated_hellos_never_panic(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        cut in any::<usize>(),
    ) {
        let mut b = browser_hello("mutated.example");
        for (i, x) in edits {
            let n = b.len();
            b[i % n] = x;
        }
        let n = cut % (b.len() + 1);
        if let Ok(h) = tls::detect(&b[..n]) {
            let mut s = Vec::new();
            h.write_ja3(&b[..n], &mut s);
            if let Some(r) = h.sni {
                prop_assert!(r.end <= n);
            }
        }
    }
}

// --- rules ------------------------------------------------------------------

#[test]
fn sni_rule_fires_on_443_and_any_other_port_but_not_on_other_bytes() {
    let rule = r#"alert tls any any -> any any (msg:"t"; flow:established,to_server; tls.sni; content:"evil.example"; sid:1;)"#;
    for port in [443, 8443, 25] {
        let f = flow(port, &[browser_hello("evil.example")], None);
        assert_eq!(sids(&[rule], &f), vec![1], "port {port}");
    }
    // Non-TLS bytes on 443 that carry the name.
    let f = flow(
        443,
        &[b"GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n".to_vec()],
        None,
    );
    assert!(sids(&[rule], &f).is_empty());
    // Another name; the name outside the SNI (a ServerHello's extension).
    let f = flow(443, &[browser_hello("good.example")], None);
    assert!(sids(&[rule], &f).is_empty());
}

#[test]
fn sni_with_nocase_startswith_endswith_bsize_dotprefix() {
    let h = browser_hello;
    assert!(fires(
        r#"tls.sni; content:"EVIL"; nocase;"#,
        h("www.evil.example")
    ));
    assert!(!fires(r#"tls.sni; content:"EVIL";"#, h("www.evil.example")));
    assert!(fires(
        r#"tls.sni; content:"evil.example"; endswith;"#,
        h("a.evil.example")
    ));
    assert!(!fires(
        r#"tls.sni; content:"evil.example"; endswith;"#,
        h("evil.example.com")
    ));
    assert!(fires(
        r#"tls.sni; content:"www."; startswith;"#,
        h("www.x.example")
    ));
    assert!(!fires(
        r#"tls.sni; content:"www."; startswith;"#,
        h("a.www.example")
    ));
    assert!(fires(
        r#"tls.sni; bsize:12; content:"evil.example";"#,
        h("evil.example")
    ));
    assert!(!fires(
        r#"tls.sni; bsize:12; content:"evil.example";"#,
        h("xevil.example")
    ));
    assert!(fires(
        r#"tls.sni; dotprefix; content:".evil.example"; endswith;"#,
        h("evil.example")
    ));
    assert!(fires(
        r#"tls.sni; dotprefix; content:".evil.example"; endswith;"#,
        h("a.evil.example")
    ));
    assert!(!fires(
        r#"tls.sni; dotprefix; content:".evil.example"; endswith;"#,
        h("notevil.example")
    ));
    // The older name.
    assert!(fires(
        r#"tls_sni; content:"evil.example";"#,
        h("evil.example")
    ));
    // A hello without SNI has no such buffer.
    let none = client_hello(0x0303, &[0x1301], Some(&[groups(&[29])]));
    assert!(!fires(r#"tls.sni; content:"e";"#, none.clone()));
    assert!(!fires(r#"tls.sni; bsize:0;"#, none));
}

#[test]
fn ja3_hash_and_string_rules() {
    assert!(fires(
        r#"ja3.hash; content:"ada70206e40642a3e4461f35503241d5";"#,
        ja3_readme_hello()
    ));
    assert!(fires(
        r#"ja3_hash; content:"ada70206e40642a3e4461f35503241d5";"#,
        ja3_readme_hello()
    ));
    assert!(!fires(
        r#"ja3.hash; content:"ada70206e40642a3e4461f35503241d5";"#,
        browser_hello("x")
    ));
    assert!(fires(
        r#"ja3.string; content:"771,4865-49195,"; startswith;"#,
        browser_hello("x")
    ));
    // GREASE is not in the string.
    assert!(!fires(r#"ja3.string; content:"2570";"#, browser_hello("x")));
    // A ServerHello has JA3S, not JA3, and no SNI.
    let sh = server_hello(0x0303, 0xc02f, &[ext(0xff01, &[0])]);
    let hash = String::from_utf8(tls::md5_hex(b"771,49199,65281").to_vec()).unwrap();
    let rule = format!(r#"alert tls any any -> any any (ja3s.hash; content:"{hash}"; sid:2;)"#);
    let str_rule = r#"alert tls any any -> any any (flow:to_client; ja3s.string; content:"771,49199,65281"; bsize:15; sid:3;)"#;
    let ja3_rule = r#"alert tls any any -> any any (ja3.string; content:"771"; sid:4;)"#;
    let f = flow(443, &[], Some(&sh));
    assert_eq!(sids(&[&rule, str_rule, ja3_rule], &f), vec![2, 3]);
}

#[test]
fn a_hello_split_across_segments_is_matched_whole() {
    let rule = r#"alert tls any any -> any any (tls.sni; content:"evil.example"; sid:1;)"#;
    let h = browser_hello("evil.example");
    assert_eq!(
        sids(&[rule], &flow(443, std::slice::from_ref(&h), None)),
        vec![1]
    );
    // The first part waits as a pending unit; the second completes it.
    let (a, b) = h.split_at(40);
    assert_eq!(
        sids(&[rule], &flow(443, &[a.to_vec(), b.to_vec()], None)),
        vec![1]
    );
}

#[test]
fn tls_keywords_make_a_tcp_rule_tls_and_are_refused_elsewhere() {
    let r = load(r#"alert tcp any any -> any any (tls.sni; content:"a"; sid:1;)"#).unwrap();
    assert_eq!(r.proto, rules::Proto::Tls);
    for (rule, reason) in [
        (
            r#"alert udp any any -> any any (tls.sni; content:"a"; sid:1;)"#,
            "keyword tls.sni on a udp rule",
        ),
        (
            r#"alert http any any -> any any (ja3.hash; content:"a"; sid:1;)"#,
            "keyword ja3.hash on a http rule",
        ),
        // Supported, but not a whole fingerprint: refused as by Suricata
        // (`tests/tls_legacy.rs`).
        (
            r#"alert tls any any -> any any (tls_cert_fingerprint; content:"a"; sid:1;)"#,
            "error: bad value",
        ),
        (
            r#"alert tls any any -> any any (tls.fingerprint:"aa"; sid:1;)"#,
            "error: bad value",
        ),
    ] {
        assert_eq!(load(rule).unwrap_err().reason(), reason, "{rule}");
    }
}

#[test]
fn alerts_and_drops_through_the_function() {
    let rules = [
        r#"alert tls $HOME_NET any -> any any (msg:"seen"; tls.sni; content:"tracker.example"; nocase; endswith; sid:10;)"#,
        r#"drop tls any any -> any any (msg:"blocked"; tls.sni; content:"malware.example"; endswith; sid:11;)"#,
    ];
    let mut i = ips(&rules);
    let (alerts, dropped) = common::run_in(
        &mut i,
        &mut LocalStore::new(),
        &flow(443, &[browser_hello("c2.malware.example")], None),
        1_000_000_000,
    );
    assert_eq!(alerts, vec![(11, AlertAction::Blocked)]);
    assert_eq!(dropped, vec![false, false, false, true]);
    let (alerts, _) = common::run_in(
        &mut i,
        &mut LocalStore::new(),
        &flow(443, &[browser_hello("ads.TRACKER.example")], None),
        2_000_000_000,
    );
    assert_eq!(alerts, vec![(10, AlertAction::Allowed)]);
}

/// Rule lines copied from ET Open (`../shared/data/et-open/`).
const ET: &[&str] = &[
    r#"alert tls $HOME_NET any -> $EXTERNAL_NET any (msg:"ET ADWARE_PUP Observed Win32/Foniad Domain (maraukog .info in TLS SNI)"; flow:established,to_server; tls.sni; content:"maraukog.info"; endswith; reference:url,www.microsoft.com/en-us/wdsi/threats/malware-encyclopedia-description?Name=BrowserModifier:Win32/Foniad; classtype:pup-activity; sid:2025487; rev:4; metadata:affected_product Windows_XP_Vista_7_8_10_Server_32_64_Bit, attack_target Client_Endpoint, created_at 2018_04_13, deployment Perimeter, former_category ADWARE_PUP, malware_family Foniad, performance_impact Moderate, signature_severity Major, updated_at 2020_09_17;)"#,
    r#"alert tls $HOME_NET any -> $EXTERNAL_NET any (msg:"ET ADWARE_PUP Observed PC Optimizer Software Domain (fortect .com in TLS SNI)"; flow:established,to_server; tls.sni; dotprefix; content:".fortect.com"; endswith; fast_pattern; reference:url,www.fortect.com/company; classtype:pup-activity; sid:2048948; rev:1; metadata:affected_product Windows_XP_Vista_7_8_10_Server_32_64_Bit, attack_target Client_Endpoint, created_at 2023_10_30, deployment Perimeter, malware_family PUP, signature_severity Informational, updated_at 2023_10_30, reviewed_at 2023_10_30;)"#,
    r#"alert tls $HOME_NET any -> $EXTERNAL_NET any (msg:"ET ADWARE_PUP Observed Bypass Ticket Monitoring Domain (www .bypass .cn in TLS SNI)"; flow:established,to_server; tls.sni; bsize:13; content:"www.bypass.cn"; fast_pattern; reference:md5,8feb11d15b708736189779ddc51a4a0a; classtype:pup-activity; sid:2048362; rev:1; metadata:attack_target Client_Endpoint, created_at 2023_09_29, deployment Perimeter, former_category ADWARE_PUP, malware_family PUP, performance_impact Low, confidence High, signature_severity Informational, updated_at 2023_09_29, reviewed_at 2024_03_04; target:src_ip;)"#,
];

#[test]
fn et_open_tls_rules_fire_on_crafted_hellos() {
    let cases: &[(&str, Option<u32>)] = &[
        ("maraukog.info", Some(2025487)),
        ("x.maraukog.info", Some(2025487)),
        ("maraukog.info.example", None),
        ("fortect.com", Some(2048948)),
        ("www.fortect.com", Some(2048948)),
        ("notfortect.com", None),
        ("www.bypass.cn", Some(2048362)),
        ("www.bypass.cn.x", None),
    ];
    for (name, want) in cases {
        let got = sids(ET, &flow(443, &[browser_hello(name)], None));
        assert_eq!(got, want.iter().copied().collect::<Vec<_>>(), "{name}");
    }
    // From outside $HOME_NET: the header's addresses still apply.
    let out = vec![
        tcp_v4([8, 8, 8, 8], S, 40000, 443, 1000, 0, SYN, &[]),
        tcp_v4(S, [8, 8, 8, 8], 443, 40000, 9000, 1001, SYN | ACK, &[]),
        tcp_v4([8, 8, 8, 8], S, 40000, 443, 1001, 9001, ACK, &[]),
        tcp_v4(
            [8, 8, 8, 8],
            S,
            40000,
            443,
            1001,
            9001,
            ACK | PSH,
            &browser_hello("maraukog.info"),
        ),
    ];
    assert!(sids(ET, &out).is_empty());
}

/// The ET Open rule set, if present (`../shared/data/et-open/`, not in the
/// repository): most `tls` rules load, none is skipped for its protocol, and
/// all that load compile into one IPS.
#[test]
fn et_open_tls_rules_load() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../../shared/data/et-open");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!("ET Open rules absent at {}: not checked", dir.display());
        return;
    };
    let vars = rules::suricata_default_vars();
    let (mut loaded, mut total) = (Vec::new(), 0);
    let mut reasons = std::collections::BTreeMap::<String, usize>::new();
    for e in entries {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "rules") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        for line in text.lines().filter(|l| l.starts_with("alert tls ")) {
            total += 1;
            match rules::parse_rule(line, &vars) {
                Ok(_) => loaded.push(line.to_string()),
                Err(e) => *reasons.entry(e.reason()).or_default() += 1,
            }
        }
    }
    eprintln!(
        "ET Open tls rules: {} of {total} load; skipped {reasons:?}",
        loaded.len()
    );
    assert!(total > 2500, "{total}");
    assert!(
        loaded.len() * 100 >= total * 99,
        "{} of {total}: {reasons:?}",
        loaded.len()
    );
    assert!(!reasons.contains_key("protocol tls"));
    // The certificate keywords are all supported now.
    for k in [
        "tls.certs",
        "tls.cert_subject",
        "tls.cert_issuer",
        "tls.cert_serial",
    ] {
        assert!(
            !reasons.contains_key(&format!("keyword {k}")),
            "{k}: {reasons:?}"
        );
    }
    let (all, errs) = rules::parse_rules(&loaded.join("\n"), "et", &vars);
    assert!(errs.is_empty());
    let mut i = Ips::new(all, vec![], sluice_state::Namespace(2), 300).unwrap();
    // With all of them loaded, a hello from HOME_NET to the outside fires the
    // Foniad SNI rule and nothing else.
    let out = [93, 184, 216, 34];
    let frames = vec![
        tcp_v4(C, out, 40000, 443, 1000, 0, SYN, &[]),
        tcp_v4(out, C, 443, 40000, 9000, 1001, SYN | ACK, &[]),
        tcp_v4(C, out, 40000, 443, 1001, 9001, ACK, &[]),
        tcp_v4(
            C,
            out,
            40000,
            443,
            1001,
            9001,
            ACK | PSH,
            &browser_hello("maraukog.info"),
        ),
    ];
    let (alerts, _) = common::run_in(&mut i, &mut LocalStore::new(), &frames, 1_000_000_000);
    let sids: Vec<u32> = alerts.iter().map(|a| a.0).collect();
    assert_eq!(sids, vec![2025487]);
}

// --- certificates ---------------------------------------------------------

const ET_CERT: &[&str] = &[
    r#"alert tls $EXTERNAL_NET any -> $HOME_NET any (msg:"ET COINMINER Observed Suspicious SSL Cert (Minerpool - CoinMining)"; flow:from_server,established; tls.cert_subject; content:"CN=eu.minerpool.pw"; nocase; fast_pattern; endswith; tls.cert_issuer; content:"C=US, O=Let's Encrypt, CN=Let's Encrypt Authority X3"; classtype:coin-mining; sid:2028623; rev:3; metadata:attack_target Client_and_Server, created_at 2019_09_25, deployment Perimeter, former_category COINMINER, performance_impact Low, signature_severity Major, tag Coinminer, updated_at 2020_09_02;)"#,
    r#"alert tls $EXTERNAL_NET any -> $HOME_NET any (msg:"ET CURRENT_EVENTS [Fireeye] Backdoor.SSL.BEACON.[CSBundle Ajax]"; flow:established,to_client; tls.cert_subject; content:"C=US, ST=WA, L=Seattle, O=Microsoft, OU=Information Technologies, CN=ajax.microsoft.com"; bsize:87; fast_pattern; tls.cert_issuer; content:"C=US, ST=WA, L=Seattle, O=Microsoft, OU=Information Technologies, CN=ajax.microsoft.com"; bsize:87; reference:url,github.com/fireeye/red_team_tool_countermeasures; classtype:trojan-activity; sid:2031299; rev:2; metadata:affected_product Windows_XP_Vista_7_8_10_Server_32_64_Bit, attack_target Client_Endpoint, created_at 2020_12_08, deployment Perimeter, former_category CURRENT_EVENTS, signature_severity Major, tag c2, updated_at 2020_12_08, mitre_tactic_id TA0011, mitre_tactic_name Command_And_Control, mitre_technique_id T1041, mitre_technique_name Exfiltration_Over_C2_Channel;)"#,
];

/// A certificate for `dn` (type and value pairs, in order) with `serial`,
/// signed by `ca` (self-signed if `None`); its DER and key.
fn cert(
    dn: &[(rcgen::DnType, &str)],
    serial: &[u8],
    ca: Option<&(rcgen::Certificate, rcgen::KeyPair)>,
) -> (rcgen::Certificate, rcgen::KeyPair) {
    let mut p = rcgen::CertificateParams::default();
    p.distinguished_name = rcgen::DistinguishedName::new();
    for (t, v) in dn {
        p.distinguished_name.push(t.clone(), *v);
    }
    p.serial_number = Some(rcgen::SerialNumber::from_slice(serial));
    let key = rcgen::KeyPair::generate().unwrap();
    let c = match ca {
        Some((ca, ca_key)) => p.signed_by(&key, ca, ca_key).unwrap(),
        None => p.self_signed(&key).unwrap(),
    };
    (c, key)
}

/// The leaf (`C=US, O=Evil Corp, CN=evil.example`, serial `00:AB:CD:01`)
/// and its CA (`C=US, O=Let's Encrypt, CN=R3`), DER.
fn chain() -> (Vec<u8>, Vec<u8>) {
    use rcgen::DnType::*;
    let ca = cert(
        &[
            (CountryName, "US"),
            (OrganizationName, "Let's Encrypt"),
            (CommonName, "R3"),
        ],
        &[0x11],
        None,
    );
    let leaf = cert(
        &[
            (CountryName, "US"),
            (OrganizationName, "Evil Corp"),
            (CommonName, "evil.example"),
        ],
        &[0xab, 0xcd, 0x01],
        Some(&ca),
    );
    (leaf.0.der().to_vec(), ca.0.der().to_vec())
}

fn handshake(hs_type: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![hs_type];
    v.extend(vec_of(3, body));
    v
}

/// A TLS 1.2 handshake record holding `msgs`.
fn record_of(msgs: &[Vec<u8>]) -> Vec<u8> {
    let mut r = vec![22, 3, 3];
    r.extend(vec_of(2, &msgs.concat()));
    r
}

/// A Certificate message of `certs`.
fn certificate(certs: &[&[u8]]) -> Vec<u8> {
    let list: Vec<u8> = certs.iter().flat_map(|c| vec_of(3, c)).collect();
    handshake(11, &vec_of(3, &list))
}

/// The ServerHello message (without its record header).
fn server_hello_msg() -> Vec<u8> {
    server_hello(0x0303, 0xc02f, &[ext(0xff01, &[0])])[5..].to_vec()
}

/// A server flight in one record: ServerHello, Certificate, ServerHelloDone.
fn flight(certs: &[&[u8]]) -> Vec<u8> {
    record_of(&[server_hello_msg(), certificate(certs), handshake(14, &[])])
}

/// Sids alerting on a hello to port 443 answered by `server` segments.
fn server_sids(rules: &[&str], server: &[Vec<u8>]) -> Vec<u32> {
    let mut frames = flow(443, &[browser_hello("evil.example")], None);
    let mut seq = 9001u32;
    let cseq = 1001 + browser_hello("evil.example").len() as u32;
    for seg in server {
        frames.push(tcp_v4(S, C, 443, 40000, seq, cseq, ACK | PSH, seg));
        seq += seg.len() as u32;
    }
    sids(rules, &frames)
}

/// True if the options (`sid:1` added) of a `tls` rule fire on `server`.
fn fires_on(opts: &str, server: &[Vec<u8>]) -> bool {
    let rule = format!("alert tls any any -> any any ({opts} sid:1;)");
    server_sids(&[&rule], server) == vec![1]
}

fn text<'a>(b: &'a tls::Buffers, buf: tls::Buf, payload: &'a [u8]) -> Option<&'a str> {
    b.get(buf, payload).map(|x| std::str::from_utf8(x).unwrap())
}

#[test]
fn certificates_are_found_after_the_hello_or_first_in_a_record() {
    let (leaf, ca) = chain();
    let derived = |p: &[u8]| {
        let h = tls::detect(p).ok();
        let mut out = Vec::new();
        let r = tls::certificates(p, h.as_ref(), &mut out);
        (
            r,
            out.iter()
                .map(|r| p[r.clone()].to_vec())
                .collect::<Vec<_>>(),
        )
    };
    let want = vec![leaf.clone(), ca.clone()];
    // In the hello's record, in the next record, in a record of its own.
    let one = flight(&[&leaf, &ca]);
    assert_eq!(derived(&one), (Ok(()), want.clone()));
    let mut two = server_hello(0x0303, 0xc02f, &[]);
    two.extend(record_of(&[certificate(&[&leaf, &ca])]));
    assert_eq!(derived(&two), (Ok(()), want.clone()));
    let alone = record_of(&[certificate(&[&leaf, &ca]), handshake(14, &[])]);
    assert_eq!(derived(&alone), (Ok(()), want.clone()));
    // A client hello has none; a hello followed by something else has none.
    assert_eq!(derived(&browser_hello("a.example")), (Ok(()), vec![]));
    let done = record_of(&[server_hello_msg(), handshake(14, &[])]);
    assert_eq!(derived(&done).0, Err(TlsError::HandshakeType(14)));
    // Cut anywhere inside the Certificate message: nothing.
    let hello_len = 5 + server_hello_msg().len();
    for cut in hello_len..hello_len + 4 + 3 + 3 + leaf.len() + 3 + ca.len() {
        let (r, certs) = derived(&one[..cut]);
        assert!(r.is_err() && certs.is_empty(), "{cut}: {r:?}");
    }
    // At most MAX_CERTS are kept, the message is still read.
    let many: Vec<&[u8]> = vec![&ca; tls::MAX_CERTS + 3];
    let (r, certs) = derived(&flight(&many));
    assert_eq!((r, certs.len()), (Ok(()), tls::MAX_CERTS));
}

#[test]
fn subject_issuer_and_serial_in_suricatas_format() {
    let (leaf, ca) = chain();
    let p = flight(&[&leaf, &ca]);
    let mut b = tls::Buffers::default();
    assert!(b.fill(&p));
    assert_eq!(
        text(&b, tls::Buf::CertSubject, &p),
        Some("C=US, O=Evil Corp, CN=evil.example")
    );
    assert_eq!(
        text(&b, tls::Buf::CertIssuer, &p),
        Some("C=US, O=Let's Encrypt, CN=R3")
    );
    assert_eq!(text(&b, tls::Buf::CertSerial, &p), Some("00:AB:CD:01"));
    let each: Vec<&[u8]> = b.each(tls::Buf::Certs, &p).collect();
    assert_eq!(each, vec![&leaf[..], &ca[..]]);
    // The ServerHello's own buffers are still there.
    assert!(b.get(tls::Buf::Ja3sString, &p).is_some());
    // The buffers are reset by the next segment.
    let hello = browser_hello("a.example");
    assert!(b.fill(&hello));
    assert_eq!(b.get(tls::Buf::CertSubject, &hello), None);
    assert_eq!(b.each(tls::Buf::Certs, &hello).count(), 0);
    assert!(!b.fill(b"GET / HTTP/1.1\r\n\r\n"));
}

#[test]
fn certificate_rules_with_content_modifiers_and_near_misses() {
    let (leaf, ca) = chain();
    let srv = vec![flight(&[&leaf, &ca])];
    let subject = "C=US, O=Evil Corp, CN=evil.example";
    let cases: &[(String, bool)] = &[
        (
            format!(
                r#"tls.cert_subject; content:"{subject}"; bsize:{};"#,
                subject.len()
            ),
            true,
        ),
        (
            format!(
                r#"tls.cert_subject; content:"{subject}"; bsize:{};"#,
                subject.len() + 1
            ),
            false,
        ),
        (
            r#"tls.cert_subject; content:"CN=evil.example"; endswith;"#.into(),
            true,
        ),
        (
            r#"tls.cert_subject; content:"CN=evil.example.org"; endswith;"#.into(),
            false,
        ),
        (
            r#"tls.cert_subject; content:"cn=EVIL.example"; nocase; endswith;"#.into(),
            true,
        ),
        (
            r#"tls.cert_subject; content:"cn=EVIL.example";"#.into(),
            false,
        ),
        (
            r#"tls.cert_subject; content:"C=US, "; startswith;"#.into(),
            true,
        ),
        (
            r#"tls.cert_subject; content:!"Let's Encrypt";"#.into(),
            true,
        ),
        (
            r#"tls.cert_issuer; content:"C=US, O=Let's Encrypt, CN=R3"; bsize:28;"#.into(),
            true,
        ),
        (
            r#"tls.cert_issuer; content:"CN=evil.example";"#.into(),
            false,
        ),
        (
            r#"tls.cert_serial; content:"00:AB:CD:01"; bsize:11;"#.into(),
            true,
        ),
        (
            r#"tls_cert_serial; content:"AB:CD"; startswith;"#.into(),
            false,
        ),
        // Suricata folds the buffer's contents to upper case, as printed
        // (Suricata 7.0.10 fires on this one too).
        (r#"tls.cert_serial; content:"00:ab:cd:01";"#.into(), true),
        (
            r#"tls.cert_serial; to_uppercase; content:"00:AB:CD:01";"#.into(),
            true,
        ),
        (
            r#"tls.cert_serial; to_lowercase; content:"00:ab:cd:01";"#.into(),
            true,
        ),
        (
            r#"tls.cert_serial; to_lowercase; content:"00:ab:cd:02";"#.into(),
            false,
        ),
        // The multi-buffer: each certificate in turn, not their concatenation.
        (
            r#"tls.certs; content:"evil.example"; content:"R3";"#.into(),
            true,
        ),
        (format!(r#"tls.certs; bsize:{};"#, ca.len()), true),
        (
            format!(r#"tls.certs; bsize:{};"#, ca.len() + leaf.len()),
            false,
        ),
        (
            r#"tls.certs; content:"|30 82|"; startswith; content:"Evil Corp"; distance:0;"#.into(),
            true,
        ),
        (r#"tls.certs; content:"Good Corp";"#.into(), false),
        // Both a hello buffer and a certificate buffer of the same segment.
        (
            r#"ja3s.string; content:"771,49199,"; startswith; tls.cert_subject; content:"Evil";"#
                .into(),
            true,
        ),
        (
            r#"tls.sni; content:"evil"; tls.cert_subject; content:"Evil";"#.into(),
            false,
        ),
    ];
    for (opts, want) in cases {
        assert_eq!(fires_on(opts, &srv), *want, "{opts}");
    }
    // A certificate rule never fires on the client's hello.
    assert!(!fires(
        r#"tls.cert_subject; content:"C";"#,
        browser_hello("evil.example")
    ));
}

#[test]
fn certificates_split_across_segments_are_parsed_whole() {
    let (leaf, ca) = chain();
    let rule = r#"tls.cert_subject; content:"CN=evil.example"; endswith;"#;
    let whole = flight(&[&leaf, &ca]);
    assert!(fires_on(rule, std::slice::from_ref(&whole)));
    // The hello in one segment, the certificate record in the next: parsed.
    let mut hello = server_hello(0x0303, 0xc02f, &[]);
    let certs = record_of(&[certificate(&[&leaf, &ca])]);
    assert!(fires_on(rule, &[hello.clone(), certs.clone()]));
    // The Certificate message cut between two segments: the first part
    // waits pending, and the whole is parsed.
    let mid = whole.len() / 2;
    assert!(fires_on(
        rule,
        &[whole[..mid].to_vec(), whole[mid..].to_vec()]
    ));
    hello.extend(&certs[..certs.len() - 10]);
    assert!(fires_on(rule, &[hello, certs[certs.len() - 10..].to_vec()]));
}

#[test]
fn a_garbage_certificate_keeps_its_bytes_and_has_no_subject() {
    let junk = b"\x30\x82\x01\x00not a certificate at all".to_vec();
    let p = flight(&[&junk]);
    let mut b = tls::Buffers::default();
    assert!(b.fill(&p));
    assert_eq!(b.get(tls::Buf::CertSubject, &p), None);
    assert_eq!(b.get(tls::Buf::CertSerial, &p), None);
    assert_eq!(
        b.each(tls::Buf::Certs, &p).collect::<Vec<_>>(),
        vec![&junk[..]]
    );
    assert!(fires_on(
        r#"tls.certs; content:"not a cert";"#,
        std::slice::from_ref(&p)
    ));
    assert!(!fires_on(r#"tls.cert_subject; content:!"x";"#, &[p]));
}

proptest! {
    #[test]
    fn random_certificates_never_panic(der in proptest::collection::vec(any::<u8>(), 0..400)) {
        let p = flight(&[&der]);
        let mut b = tls::Buffers::default();
        prop_assert!(b.fill(&p));
        let _ = b.all(&p).count();
    }

    #[test]
    fn mutated_flights_never_panic(
        at in 0usize..2000,
        byte in any::<u8>(),
        cut in 0usize..2000,
    ) {
        let (leaf, ca) = CHAIN.with(|c| c.clone());
        let mut p = flight(&[&leaf, &ca]);
        let i = at % p.len();
        p[i] = byte;
        p.truncate(cut.max(1) * p.len() / 2000 + 1);
        let mut b = tls::Buffers::default();
        let _ = b.fill(&p);
        let _ = b.all(&p).count();
    }
}

thread_local! {
    /// One chain for the property tests (key generation is slow).
    static CHAIN: (Vec<u8>, Vec<u8>) = chain();
}

#[test]
fn et_open_certificate_rules_fire_on_crafted_certificates() {
    use rcgen::DnType::*;
    // 2031299: a CobaltStrike-like self-signed "ajax.microsoft.com" whose
    // subject and issuer are 87 bytes.
    let ms = [
        (CountryName, "US"),
        (StateOrProvinceName, "WA"),
        (LocalityName, "Seattle"),
        (OrganizationName, "Microsoft"),
        (OrganizationalUnitName, "Information Technologies"),
        (CommonName, "ajax.microsoft.com"),
    ];
    let (c, _) = cert(&ms, &[1], None);
    assert_eq!(server_sids(ET_CERT, &[flight(&[c.der()])]), vec![2031299]);
    // An organization one byte longer: no longer 87 bytes (rcgen keeps one
    // value per attribute type).
    let mut more = ms.to_vec();
    more[3].1 = "Microsofts";
    let (c, _) = cert(&more, &[1], None);
    assert!(server_sids(ET_CERT, &[flight(&[c.der()])]).is_empty());
    // 2028623: a minerpool.pw host under Let's Encrypt Authority X3.
    let le = cert(
        &[
            (CountryName, "US"),
            (OrganizationName, "Let's Encrypt"),
            (CommonName, "Let's Encrypt Authority X3"),
        ],
        &[2],
        None,
    );
    let pool = |cn: &str| {
        let (c, _) = cert(&[(CommonName, cn)], &[3], Some(&le));
        server_sids(ET_CERT, &[flight(&[c.der(), le.0.der()])])
    };
    assert_eq!(pool("eu.minerpool.pw"), vec![2028623]);
    assert_eq!(pool("EU.MinerPool.PW"), vec![2028623]);
    assert!(pool("eu.minerpool.pw.example").is_empty());
    let (c, _) = cert(&[(CommonName, "eu.minerpool.pw")], &[3], None);
    assert!(server_sids(ET_CERT, &[flight(&[c.der()])]).is_empty());
}

/// A browser's hello with a post-quantum key share (X25519MLKEM768: a
/// 1,216-byte ML-KEM key and an X25519 one) and ECH GREASE, about 1.7 KB:
/// more than one 1,460-byte segment.
fn pq_hello(name: &str) -> Vec<u8> {
    let shares = [
        u16s(&[0x11ec]),
        vec_of(2, &[0x42; 1216]),
        u16s(&[29]),
        vec_of(2, &[0x43; 32]),
    ]
    .concat();
    client_hello(
        0x0303,
        &[0x0a0a, 0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f],
        Some(&[
            ext(0x0a0a, &[]),
            sni(name),
            groups(&[0x1a1a, 0x11ec, 29, 23]),
            formats(&[0]),
            ext(
                13,
                &vec_of(
                    2,
                    &u16s(&[
                        0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601,
                    ]),
                ),
            ),
            ext(16, &vec_of(2, b"\x02h2\x08http/1.1")),
            ext(43, &vec_of(1, &u16s(&[0x2a2a, 0x0304, 0x0303]))),
            ext(51, &vec_of(2, &shares)),
            // Encrypted Client Hello GREASE, as Chrome sends it.
            ext(0xfe0d, &[0x55; 250]),
            ext(0xff01, &[0]),
        ]),
    )
}

fn sorted(mut v: Vec<u32>) -> Vec<u32> {
    v.sort_unstable();
    v
}

/// Client rules (ET Open's sni rules, a JA3 string) and server rules
/// (JA3S, the certificate's subject and issuer).
const SPLIT_RULES: &[&str] = &[
    ET[0],
    ET[1],
    r#"alert tls any any -> any any (msg:"ja3"; ja3.string; content:"771,4865-4866-4867-49195-49199,"; startswith; sid:41;)"#,
    r#"alert tls any any -> any any (msg:"ja3s"; ja3s.string; content:"771,49199,65281"; sid:42;)"#,
    r#"alert tls any any -> any any (msg:"subject"; tls.cert_subject; content:"CN=evil.example"; endswith; sid:43;)"#,
    r#"alert tls any any -> any any (msg:"issuer"; tls.cert_issuer; content:"O=Let's Encrypt"; sid:44;)"#,
];

/// The client's hello and the server's flight cut at `ccuts` and `scuts`.
fn split_flow(hello: &[u8], server: &[u8], ccuts: &[usize], scuts: &[usize]) -> Vec<Vec<u8>> {
    let mut frames = flow(443, &common::pieces(hello, ccuts), None);
    let cseq = 1001 + hello.len() as u32;
    let mut seq = 9001u32;
    for seg in common::pieces(server, scuts) {
        frames.push(tcp_v4(S, C, 443, 40000, seq, cseq, ACK | PSH, &seg));
        seq += seg.len() as u32;
    }
    frames
}

#[test]
fn a_post_quantum_hello_in_two_segments_fires_et_open_sni_rules() {
    let h = pq_hello("x.maraukog.info");
    assert!(h.len() > 1460 && h.len() < 2000, "{}", h.len());
    let frames = flow(443, &common::pieces(&h, &[1460]), None);
    assert_eq!(frames.len(), 5);
    assert_eq!(sids(ET, &frames), vec![2025487]);
    let (a, _, c) = batched(ET, &frames);
    assert_eq!(a, vec![2025487]);
    assert_eq!((c.pending_saved, c.pending_joined), (1, 1));
    // Two instances sharing a store: the first sees the first segment, the
    // second the rest, and fires.
    let mut st = LocalStore::new();
    let (a, _) = common::run_in(&mut ips(ET), &mut st, &frames[..4], 1_000_000_000);
    assert!(a.is_empty());
    let mut other = ips(ET);
    let (a, _) = common::run_in(&mut other, &mut st, &frames[4..], 2_000_000_000);
    assert_eq!(a, vec![(2025487, AlertAction::Allowed)]);
    assert_eq!(other.stats().pending_joined, 1);
}

#[test]
fn hellos_and_certificates_split_at_every_byte_fire_the_same_rules() {
    let (leaf, ca) = chain();
    let hello = pq_hello("www.fortect.com");
    // The server's hello in its own record, then a record holding the
    // Certificate and ServerHelloDone (as a TLS 1.2 server sends them).
    let mut server = server_hello(0x0303, 0xc02f, &[ext(0xff01, &[0])]);
    server.extend(record_of(&[certificate(&[&leaf, &ca]), handshake(14, &[])]));
    let whole = sorted(sids(SPLIT_RULES, &split_flow(&hello, &server, &[], &[])));
    assert_eq!(whole, vec![41, 42, 43, 44, 2048948]);
    for cut in 1..hello.len() {
        let f = split_flow(&hello, &server, &[cut], &[]);
        assert_eq!(sorted(sids(SPLIT_RULES, &f)), whole, "client cut at {cut}");
    }
    for cut in 1..server.len() {
        let f = split_flow(&hello, &server, &[], &[cut]);
        assert_eq!(sorted(sids(SPLIT_RULES, &f)), whole, "server cut at {cut}");
    }
    // The coalesced flight (one record) too, through the store.
    let one = flight(&[&leaf, &ca]);
    for cut in 1..one.len() {
        let f = split_flow(&hello, &one, &[], &[cut]);
        let (a, _, c) = batched(SPLIT_RULES, &f);
        assert_eq!(sorted(a), whole, "flight cut at {cut}");
        assert_eq!(c.pending_discarded + c.pending_lost, 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn a_handshake_cut_anywhere_fires_the_same_rules(
        ccuts in proptest::collection::vec(1usize..1700, 0..6),
        scuts in proptest::collection::vec(1usize..1500, 0..6),
    ) {
        let (leaf, ca) = chain();
        let hello = pq_hello("www.fortect.com");
        let server = flight(&[&leaf, &ca]);
        let whole = sorted(sids(SPLIT_RULES, &split_flow(&hello, &server, &[], &[])));
        let (mut c, mut s) = (ccuts, scuts);
        c.sort_unstable();
        s.sort_unstable();
        let (a, _, _) = batched(SPLIT_RULES, &split_flow(&hello, &server, &c, &s));
        prop_assert_eq!(sorted(a), whole);
    }
}

#[test]
fn a_drop_rule_on_a_split_hello_drops_the_packet_completing_it() {
    let rule = r#"drop tls any any -> any any (msg:"t"; tls.sni; content:"evil.example"; sid:45;)"#;
    let h = pq_hello("evil.example");
    let mut frames = flow(443, &common::pieces(&h, &[700, 1400]), None);
    frames.push(tcp_v4(
        C,
        S,
        40000,
        443,
        1001 + h.len() as u32,
        9001,
        ACK | PSH,
        b"more",
    ));
    let (a, d, _) = batched(&[rule], &frames);
    assert_eq!(a, vec![45]);
    assert_eq!(d, vec![false, false, false, false, false, true, true]);
}

/// What a split unit costs in the store, one packet per batch (the worst
/// case: within a batch a unit never reaches the store). The reassembler
/// keeps its state in a store of its own here, so the counts are the IPS's.
#[test]
fn a_split_unit_costs_one_read_round_trip_and_a_blob() {
    use sluice_nf::{Ctx, NetworkFunction, Streams};
    use sluice_packet::{Batch, PacketPool};
    use sluice_reassembly::Reassembler;
    use sluice_state::{StateStore, StoreCounters};
    let h = pq_hello("www.fortect.com");
    // Per data packet: the IPS store's counters over its batch.
    // `fresh`: each packet on a new instance sharing the store.
    let cost = |segs: &[Vec<u8>], fresh: bool| -> Vec<StoreCounters> {
        let frames = flow(443, segs, None);
        let mut i = ips(ET);
        let (mut rs, mut st) = (LocalStore::new(), LocalStore::new());
        let mut r = Reassembler::new(sluice_state::Namespace(1), Default::default());
        let mut pool = PacketPool::new(8);
        let mut out = Vec::new();
        for (k, f) in frames.iter().enumerate() {
            let mut b = Batch::with_capacity(1);
            b.push_frame(&mut pool, f, 1 + k as u64 * 1_000_000, 0);
            for p in &mut b.pkts {
                p.meta = sluice_wire::parse::parse_frame(p.data()).unwrap();
            }
            let mut streams = Streams::default();
            r.process(&mut b, &mut rs, &mut streams, 1).unwrap();
            let (mut events, mut emit) = (Vec::new(), Vec::new());
            let mut ctx = Ctx {
                now_ns: 1 + k as u64 * 1_000_000,
                stage: 2,
                streams: &streams,
                events: &mut events,
                emit: &mut emit,
            };
            if fresh {
                i = ips(ET);
            }
            let before = st.counters();
            i.process(&mut b, &mut ctx, &mut st).unwrap();
            let after = st.counters();
            if k >= 3 {
                out.push(StoreCounters {
                    round_trips: after.round_trips - before.round_trips,
                    reads: after.reads - before.reads,
                    writes: after.writes - before.writes,
                    timers: after.timers - before.timers,
                    ..Default::default()
                });
            }
        }
        out
    };
    let whole = cost(std::slice::from_ref(&h), false);
    let split = cost(&common::pieces(&h, &[1460]), true);
    let same = cost(&common::pieces(&h, &[1460]), false);
    let show = |c: &StoreCounters| {
        format!(
            "{} round trips, {} reads, {} writes, {} timer ops",
            c.round_trips, c.reads, c.writes, c.timers
        )
    };
    eprintln!("whole hello ({} bytes): {}", h.len(), show(&whole[0]));
    eprintln!(
        "split, first part (blob of 1460 bytes): {}",
        show(&split[0])
    );
    eprintln!("split, completing part: {}", show(&split[1]));
    // The first part: the record and the blob written with its timer, in
    // the batch's one write round trip.
    assert_eq!((split[0].round_trips, split[0].reads), (2, 1));
    assert_eq!(split[0].writes, 2);
    // The completing part: one more round trip, to read the blob; the
    // record written and the blob deleted in the write round trip.
    assert_eq!((split[1].round_trips, split[1].reads), (3, 2));
    assert_eq!(split[1].writes, 2);
    assert_eq!(split[1].timers, 0);
    // On the instance that wrote the blob, the completing part takes it
    // from memory: no read round trip for it.
    assert_eq!(same[0], split[0]);
    assert_eq!((same[1].round_trips, same[1].reads), (2, 1));
    assert_eq!(same[1].writes, 2);
    // Whole, the same rule fires with one read and no write: an alert
    // alone changes nothing in the record (rules fire per packet, nothing
    // remembers that they did).
    assert_eq!(
        (whole[0].round_trips, whole[0].reads, whole[0].writes),
        (1, 1, 0)
    );
}

/// [`common::run_each`] with an IPS of `rules`.
fn batched(rules: &[&str], frames: &[Vec<u8>]) -> (Vec<u32>, Vec<bool>, sluice_ips::Counters) {
    common::run_each(ips(rules), frames)
}

/// `msgs` (handshake messages, headers included) as TLS 1.2 handshake
/// records of at most `size` bytes of body each: the record layer may
/// fragment a message anywhere (RFC 5246 §6.2.1).
fn fragmented(msgs: &[u8], size: usize) -> Vec<u8> {
    msgs.chunks(size)
        .flat_map(|c| {
            let mut r = vec![22, 3, 3];
            r.extend(vec_of(2, c));
            r
        })
        .collect()
}

#[test]
fn a_hello_fragmented_over_records_is_read_joined() {
    // An evasion when only whole records are read: the SNI split by the
    // record layer. Whole in one segment, then also cut across segments.
    let rule = r#"alert tls any any -> any any (tls.sni; content:"evil.example"; sid:1;)"#;
    let msg = browser_hello("evil.example")[5..].to_vec();
    for size in [1, 7, 40, 60] {
        let recs = fragmented(&msg, size);
        assert_eq!(
            sids(&[rule], &flow(443, std::slice::from_ref(&recs), None)),
            vec![1],
            "records of {size}"
        );
        let (a, b) = recs.split_at(recs.len() / 2);
        assert_eq!(
            sids(&[rule], &flow(443, &[a.to_vec(), b.to_vec()], None)),
            vec![1],
            "records of {size}, two segments"
        );
    }
    // The joined view parses as the hello sent in one record.
    let recs = fragmented(&msg, 9);
    let mut joined = Vec::new();
    assert!(tls::defragment(&recs, &mut joined));
    assert!(tls::detect(&joined).unwrap().sni.is_some());
    // Not TLS after all: another record type after the first ends the join.
    let mut alert = fragmented(&msg[..20], 20);
    alert.extend([21, 3, 3, 0, 2, 2, 40]);
    assert_eq!(sids(&[rule], &flow(443, &[alert], None)), Vec::<u32>::new());
}

#[test]
fn a_certificate_chain_over_several_records_is_read() {
    // A ServerHello record, then the Certificate message in records of 500
    // bytes (a chain larger than a record is common).
    let (leaf, ca) = chain();
    let mut server = server_hello(0x0303, 0xc02f, &[]);
    let mut rest = certificate(&[&leaf, &ca]);
    rest.extend(handshake(14, &[]));
    server.extend(fragmented(&rest, 500));
    let rule =
        r#"alert tls any any -> any any (tls.cert_subject; content:"CN=evil.example"; sid:1;)"#;
    assert_eq!(server_sids(&[rule], std::slice::from_ref(&server)), vec![1]);
    // Cut across segments inside a record header and inside a body.
    for cut in [server.len() - 300, 5 + server_hello_msg().len() + 2] {
        let (a, b) = server.split_at(cut);
        assert_eq!(
            server_sids(&[rule], &[a.to_vec(), b.to_vec()]),
            vec![1],
            "cut at {cut}"
        );
    }
}

// --- tls.version ------------------------------------------------------------

/// `tls.version` compares the version Suricata keeps for the packet's side:
/// the ClientHello's on the client's packets, the ServerHello's on the
/// server's, where TLS 1.3's `supported_versions` extension (RFC 8446
/// §4.2.1) gives the selected version and a draft (0x7fNN) counts as 1.3
/// unless the rule writes a raw value.
#[test]
fn tls_version_per_side() {
    let r = |sid: u32, opts: &str| format!("alert tls any any -> any any ({opts} sid:{sid};)");
    let rules = [
        r(1, "flow:to_server; tls.version:1.2;"),
        r(2, "flow:to_server; tls.version:1.1;"),
        r(3, "flow:to_client; tls.version:1.3;"),
        r(4, "flow:to_client; tls.version:1.2;"),
        r(5, "flow:to_client; tls.version:0x7f1c;"),
        r(6, "flow:to_client; tls.version:\"0x0304\";"),
        r(7, "tls.version:1.0; content:\"|00 2f|\";"),
    ];
    let rules: Vec<&str> = rules.iter().map(String::as_str).collect();
    let sh13 = server_hello(0x0303, 0x1301, &[ext(43, &[3, 4])]);
    let got = sids(
        &rules,
        &flow(443, &[browser_hello("a.example")], Some(&sh13)),
    );
    assert_eq!(got, vec![1, 3, 6]);
    // A TLS 1.2 server (no extension): its hello's version.
    let sh12 = server_hello(0x0303, 0xc02b, &[]);
    let got = sids(
        &rules,
        &flow(443, &[browser_hello("a.example")], Some(&sh12)),
    );
    assert_eq!(got, vec![1, 4]);
    // A draft version selected: 1.3 by name, and its own raw value.
    let draft = server_hello(0x0303, 0x1301, &[ext(43, &[0x7f, 0x1c])]);
    let got = sids(
        &rules,
        &flow(443, &[browser_hello("a.example")], Some(&draft)),
    );
    assert_eq!(got, vec![1, 3, 5]);
    // A TLS 1.0 ClientHello: sid 7's version and its payload content.
    let got = sids(&rules, &flow(443, &[ja3_readme_hello()], None));
    assert_eq!(got, vec![7]);
}

#[test]
fn tls_version_parsing() {
    let v = |x: &str| {
        load(&format!(
            "alert tls any any -> any any (tls.version:{x}; sid:1;)"
        ))
    };
    assert_eq!(v("1.2").unwrap().tls_version.unwrap().ver, 0x0303);
    assert_eq!(v("\"1.3\"").unwrap().tls_version.unwrap().ver, 0x0304);
    let raw = v("0x0300").unwrap().tls_version.unwrap();
    assert!(raw.raw && raw.ver == 0x0300);
    for bad in ["1.4", "0x303", "0x030303", "tls1.2", "", "0xzzzz"] {
        assert!(v(bad).is_err(), "{bad}");
    }
    // It makes a tcp rule a tls rule, and is refused on others.
    let t = load("alert tcp any any -> any any (tls.version:1.2; sid:1;)").unwrap();
    assert_eq!(t.proto, rules::Proto::Tls);
    assert!(load("alert udp any any -> any any (tls.version:1.2; sid:1;)").is_err());
}
