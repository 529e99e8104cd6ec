//! `base64_decode` / `base64_data`: a buffer's base64 decoded as Suricata's
//! `DecodeBase64` does (non-strict, Suricata 5/6) and inspected by the
//! keywords after `base64_data`, with examples from Suricata's documentation
//! (rules/base64-keywords) and ET Open's rules.

use sluice_ips::rules::payload::base64_decode_into;
use sluice_ips::rules::{parse_rule, RuleSyntax, Vars};
use sluice_ips::Ips;
use sluice_state::LocalStore;
use sluice_wire::build::{tcp_v4, udp_v4};
use sluice_wire::tcp::flags::{ACK, PSH, SYN};

mod common;

const C: [u8; 4] = [10, 0, 0, 1];
const S: [u8; 4] = [192, 168, 1, 2];

fn ips(rules: &[&str]) -> Ips {
    common::ips_with(rules, &[])
}

fn decode(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let n = base64_decode_into(s, &mut out);
    assert_eq!(n, out.len());
    out
}

#[test]
fn decoding_as_suricata() {
    assert_eq!(decode(b"SGVsbG8gV29ybGQ="), b"Hello World");
    assert_eq!(decode(b"dGVzdA=="), b"test");
    // An incomplete block at the end gives its whole bytes.
    assert_eq!(decode(b"SGVsbG8"), b"Hello");
    // A character neither base64 nor `=` ends decoding, and drops the
    // incomplete block before it; so does a NUL, keeping it.
    assert_eq!(decode(b"SGVs bG8="), b"Hel");
    assert_eq!(decode(b"SGVsbG!8="), b"Hel");
    assert_eq!(decode(b"SGVsbG8\0=="), b"Hello");
    assert_eq!(decode(b"QQ=="), b"A");
    assert!(decode(b"").is_empty());
    assert!(decode(b"!abc").is_empty());
    assert!(decode(b"Q").is_empty());
}

/// Sids on one UDP datagram.
fn on_udp(rules: &[&str], payload: &[u8]) -> Vec<u32> {
    let f = udp_v4(C, S, 5000, 53, payload);
    common::run_in(&mut ips(rules), &mut LocalStore::new(), &[f], 1)
        .0
        .into_iter()
        .map(|a| a.0)
        .collect()
}

#[test]
fn decoded_bytes_after_a_content() {
    let r = [
        "alert udp any any -> any any (content:\"data=\"; base64_decode:relative; base64_data; content:\"secret\"; sid:1;)",
        "alert udp any any -> any any (content:\"data=\"; base64_decode:relative; base64_data; content:\"cret\"; startswith; sid:2;)",
        "alert udp any any -> any any (content:\"data=\"; base64_decode:bytes 4, relative; base64_data; content:\"secret\"; sid:3;)",
        "alert udp any any -> any any (content:\"data=\"; base64_decode:offset 4,relative; base64_data; content:\"ret\"; depth:3; sid:4;)",
        "alert udp any any -> any any (base64_decode; base64_data; content:\"|ff|\"; sid:5;)",
    ];
    // "secret!": sid 1; sid 2's content does not start it; sid 3 decodes
    // only "sec"; sid 4 skips "c2Vj" and decodes "cmV0IQ==" ("ret!").
    assert_eq!(on_udp(&r, b"data=c2VjcmV0IQ=="), vec![1, 4]);
    // The raw bytes are not the decoded ones.
    assert!(on_udp(&r, b"data=secret").is_empty());
    // Decoding stops at the space: "sec" only.
    assert!(on_udp(&r, b"data=c2Vj cmV0").is_empty());
    // Without relative, from the buffer's start ("/w==" is 0xff).
    assert_eq!(on_udp(&r, b"/w=="), vec![5]);
}

/// A relative `base64_decode` that fails retries the content before it at
/// its next occurrence (Suricata's content inspection backtracks).
#[test]
fn backtracking_to_the_next_occurrence() {
    let r = ["alert udp any any -> any any (content:\"data=\"; base64_decode:relative; base64_data; content:\"secret\"; sid:1;)"];
    assert_eq!(on_udp(&r, b"data=!!!! data=c2VjcmV0IQ=="), vec![1]);
}

/// Suricata's documentation's example: `http.uri; content:"somestring";
/// base64_decode:bytes 8, offset 1, relative; base64_data; content:"test";`.
#[test]
fn the_documentation_example_on_an_http_uri() {
    let rule = "alert http any any -> any any (msg:\"Example\"; http.uri; content:\"somestring\"; base64_decode:bytes 8, offset 1, relative; base64_data; content:\"test\"; sid:10001; rev:1;)";
    let req = |uri: &str| {
        let r = format!("GET {uri} HTTP/1.1\r\nHost: x\r\n\r\n");
        vec![
            tcp_v4(C, S, 40000, 80, 1000, 0, SYN, &[]),
            tcp_v4(S, C, 80, 40000, 9000, 1001, SYN | ACK, &[]),
            tcp_v4(C, S, 40000, 80, 1001, 9001, ACK, &[]),
            tcp_v4(C, S, 40000, 80, 1001, 9001, ACK | PSH, r.as_bytes()),
        ]
    };
    let sids = |uri: &str| -> Vec<u32> {
        common::run_in(&mut ips(&[rule]), &mut LocalStore::new(), &req(uri), 1)
            .0
            .into_iter()
            .map(|a| a.0)
            .collect()
    };
    assert_eq!(sids("/somestringXdGVzdA=="), vec![10001]);
    // Offset 1 skips one byte: without it the decoding is shifted.
    assert!(sids("/somestringdGVzdA==").is_empty());
}

/// ET Open's ManageEngine rule (sid 2043330's shape): a request body
/// starting `SAMLResponse=` whose base64 decodes to a `:eval(` call.
#[test]
fn an_et_open_request_body_rule() {
    let rule = "alert http any any -> any any (msg:\"ET EXPLOIT ManageEngine Unauthenticated RCE Attempt M11 (CVE-2022-47966)\"; flow:established,to_server; http.method; content:\"POST\"; http.request_body; content:\"SAMLResponse=\"; startswith; fast_pattern; nocase; base64_decode:offset 0, relative; base64_data; content:\"|3a|eval|28|\"; nocase; classtype:attempted-admin; sid:2043330; rev:1;)";
    let post = |body: &[u8]| {
        let mut r = format!(
            "POST /SamlResponseServlet HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        r.extend_from_slice(body);
        vec![
            tcp_v4(C, S, 40000, 80, 1000, 0, SYN, &[]),
            tcp_v4(S, C, 80, 40000, 9000, 1001, SYN | ACK, &[]),
            tcp_v4(C, S, 40000, 80, 1001, 9001, ACK, &[]),
            tcp_v4(C, S, 40000, 80, 1001, 9001, ACK | PSH, &r),
        ]
    };
    let sids = |body: &[u8]| -> Vec<u32> {
        let mut i = common::ips_with(&[rule], &[]);
        common::run_in(&mut i, &mut LocalStore::new(), &post(body), 1)
            .0
            .into_iter()
            .map(|a| a.0)
            .collect()
    };
    // `<a:eval("x")>` encoded.
    assert_eq!(sids(b"SAMLResponse=PGE6ZXZhbCgieCIpPg=="), vec![2043330]);
    // The same words in clear are not what the rule looks for.
    assert!(sids(b"SAMLResponse=<a:eval(\"x\")>").is_empty());
}

#[test]
fn refused_forms() {
    let p = |o: &str| {
        parse_rule(
            &format!("alert http any any -> any any (http.uri; content:\"a\"; {o} sid:1;)"),
            &Vars::new(),
        )
    };
    assert!(p("base64_decode:bytes 8, offset 1, relative; base64_data; content:\"t\";").is_ok());
    // Rule keywords may follow base64_data (ET Open's CVE-2021-42321 rule
    // sets an xbit there); its contents stay on the decoded bytes.
    let r = p("base64_decode; base64_data; content:\"t\"; xbits:set,x,track ip_src; flow:to_server; content:\"u\";").unwrap();
    assert_eq!(r.base64.len(), 2);
    assert!(r.contents[1].in_b64 && r.contents[2].in_b64);
    for bad in [
        "base64_data; content:\"t\";", // no base64_decode
        "base64_decode:bytes 0; base64_data; content:\"t\";", // bytes must be > 0
        "base64_decode:bytes x; base64_data; content:\"t\";",
        "base64_decode:frob 1; base64_data; content:\"t\";",
        "base64_decode:relative, relative; base64_data; content:\"t\";",
    ] {
        assert!(
            matches!(p(bad), Err(RuleSyntax::BadValue { .. })),
            "{bad}: {:?}",
            p(bad)
        );
    }
    for bad in [
        // A keyword between the decoding and its data.
        "base64_decode; content:\"b\"; base64_data; content:\"t\";",
        // Another buffer after base64_data.
        "base64_decode; base64_data; content:\"t\"; http.host; content:\"h\";",
        "base64_decode; base64_decode; base64_data; content:\"t\";",
        // Nothing to inspect the decoded bytes.
        "base64_decode;",
    ] {
        assert!(
            matches!(p(bad), Err(RuleSyntax::UnsupportedKeyword(_))),
            "{bad}: {:?}",
            p(bad)
        );
    }
}
