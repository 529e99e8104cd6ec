//! TLS: the hello parser (never panics), detection by content whatever the
//! ports, and rules of protocol `tls` with the `tls.sni`, `ja3.hash`,
//! `ja3.string`, `ja3s.hash` and `ja3s.string` sticky buffers. Hellos are
//! built byte by byte here; the TCP/IP layers by `sluice_wire::build`.

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
fn a_hello_split_across_segments_is_not_matched() {
    let rule = r#"alert tls any any -> any any (tls.sni; content:"evil.example"; sid:1;)"#;
    let h = browser_hello("evil.example");
    assert_eq!(
        sids(&[rule], &flow(443, std::slice::from_ref(&h), None)),
        vec![1]
    );
    // Nothing is buffered between segments: neither half is a whole hello.
    let (a, b) = h.split_at(40);
    assert!(sids(&[rule], &flow(443, &[a.to_vec(), b.to_vec()], None)).is_empty());
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
        (
            r#"alert tls any any -> any any (tls.cert_subject; content:"a"; sid:1;)"#,
            "keyword tls.cert_subject",
        ),
        (
            r#"alert tls any any -> any any (tls.version:1.2; sid:1;)"#,
            "keyword tls.version",
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
        loaded.len() * 100 >= total * 70,
        "{} of {total}: {reasons:?}",
        loaded.len()
    );
    assert!(!reasons.contains_key("protocol tls"));
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
