//! DNS: the wire parser (never panics), detection by content whatever the
//! ports, and rules of protocol `dns` with the `dns.query` sticky buffer, with
//! Suricata's semantics: each question's name of a request, dotted, inspected
//! on its own. Messages are built as wire bytes here; the UDP/TCP/IP layers by
//! `sluice_wire::build`.

use std::path::Path;

use proptest::prelude::*;
use sluice_ips::dns::{self, DnsError, Message};
use sluice_ips::rules::{self, RuleSyntax};
use sluice_ips::Ips;
use sluice_nf::AlertAction;
use sluice_state::LocalStore;
use sluice_wire::build::{tcp_v4, udp_v4};
use sluice_wire::tcp::flags::{ACK, PSH, SYN};

mod common;

const C: [u8; 4] = [10, 0, 0, 1];
const S: [u8; 4] = [192, 168, 1, 2];

/// A name in wire form: length-prefixed labels, then the root.
fn wire_name(name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for l in name.split('.').filter(|l| !l.is_empty()) {
        out.push(l.len() as u8);
        out.extend_from_slice(l.as_bytes());
    }
    out.push(0);
    out
}

/// A message: header with `flags` and counts, then `body`.
fn message(flags: u16, counts: [u16; 4], body: &[u8]) -> Vec<u8> {
    let mut m = vec![0x12, 0x34];
    m.extend_from_slice(&flags.to_be_bytes());
    for c in counts {
        m.extend_from_slice(&c.to_be_bytes());
    }
    m.extend_from_slice(body);
    m
}

fn question(name: &str) -> Vec<u8> {
    let mut q = wire_name(name);
    q.extend_from_slice(&[0, 1, 0, 1]); // A, IN
    q
}

/// A recursive query for `names` (one question each).
fn query(names: &[&str]) -> Vec<u8> {
    let body: Vec<u8> = names.iter().flat_map(|n| question(n)).collect();
    message(0x0100, [names.len() as u16, 0, 0, 0], &body)
}

/// The response to a query for `name`: the question, and one A record whose
/// name is a compression pointer to it.
fn response(name: &str) -> Vec<u8> {
    let mut body = question(name);
    body.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 93, 184, 216, 34]);
    message(0x8180, [1, 1, 0, 0], &body)
}

fn ips(rules: &[&str]) -> Ips {
    common::ips_with(rules, &[("HOME_NET", "10.0.0.0/8")])
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

/// A request from the client to `server_port`.
fn udp_query(names: &[&str], server_port: u16) -> Vec<u8> {
    udp_v4(C, S, 40000, server_port, &query(names))
}

/// True if the options (`sid:1` added) of a `dns` rule fire on a query for
/// `name`.
fn fires(opts: &str, name: &str) -> bool {
    let rule = format!("alert dns any any -> any any ({opts} sid:1;)");
    sids(&[&rule], &[udp_query(&[name], 53)]) == vec![1]
}

fn load(rule: &str) -> Result<rules::Rule, RuleSyntax> {
    rules::parse_rule(rule, &rules::suricata_default_vars())
}

// --- the parser -----------------------------------------------------------

#[test]
fn parses_header_and_questions() {
    let q = query(&["www.example.com", "b.example"]);
    let m = Message::parse(&q).unwrap();
    let h = m.header();
    assert_eq!(h.id(), 0x1234);
    assert!(!h.qr());
    assert_eq!(
        (h.opcode(), h.rcode(), h.qdcount(), h.ancount()),
        (0, 0, 2, 0)
    );
    assert!(m.is_request());
    let names: Vec<Vec<u8>> = m
        .questions()
        .iter()
        .map(|q| {
            let mut v = Vec::new();
            m.write_name(q, &mut v);
            v
        })
        .collect();
    assert_eq!(
        names,
        vec![b"www.example.com".to_vec(), b"b.example".to_vec()]
    );
    assert_eq!(m.questions()[0].qtype, 1);
    assert_eq!(m.questions()[0].qclass, 1);

    let r = response("www.example.com");
    let m = Message::parse(&r).unwrap();
    assert!(!m.is_request());
    assert_eq!(m.header().rcode(), 0);
    assert_eq!(m.header().ancount(), 1);
}

#[test]
fn label_bytes_stay_as_they_are() {
    // A `.` inside a label is not a separator on the wire; the dotted form
    // shows it as is (Suricata's).
    let mut body = vec![3, b'a', b'.', b'b', 2, b'c', b'd', 0];
    body.extend_from_slice(&[0, 1, 0, 1]);
    let q = message(0x0100, [1, 0, 0, 0], &body);
    let m = Message::parse(&q).unwrap();
    let mut v = Vec::new();
    m.write_name(&m.questions()[0], &mut v);
    assert_eq!(v, b"a.b.cd");
}

#[test]
fn refuses_malformed_messages_with_named_errors() {
    let ok = query(&["example.com"]);
    assert_eq!(
        Message::parse(&ok[..11]).unwrap_err(),
        DnsError::Truncated(11)
    );
    // A label running past the end.
    assert!(matches!(
        Message::parse(&ok[..ok.len() - 6]),
        Err(DnsError::Truncated(_))
    ));
    // Trailing bytes.
    let mut t = ok.clone();
    t.push(0);
    assert_eq!(Message::parse(&t).unwrap_err(), DnsError::TrailingBytes(1));
    // A query without a question, or with a response code.
    let none = message(0x0100, [0, 0, 0, 0], &[]);
    assert_eq!(Message::parse(&none).unwrap_err(), DnsError::NoQuestion);
    let mut rc = ok.clone();
    rc[3] |= 2;
    assert_eq!(Message::parse(&rc).unwrap_err(), DnsError::QueryRcode(2));
    // Reserved bit, unassigned opcode.
    let mut z = ok.clone();
    z[3] |= 0x40;
    assert_eq!(Message::parse(&z).unwrap_err(), DnsError::ReservedBit);
    let mut op = ok.clone();
    op[2] |= 3 << 3;
    assert_eq!(Message::parse(&op).unwrap_err(), DnsError::Opcode(3));
    // More questions than the limit.
    let many: Vec<&str> = vec!["a.b"; 17];
    assert_eq!(
        Message::parse(&query(&many)).unwrap_err(),
        DnsError::TooManyQuestions(17)
    );
    assert!(Message::parse(&query(&vec!["a.b"; 16])).is_ok());
    // Counts announcing records that are not there.
    let mut more = ok.clone();
    more[7] = 1;
    assert!(matches!(Message::parse(&more), Err(DnsError::Truncated(_))));
}

#[test]
fn compression_pointers_are_bounded() {
    // A pointer to itself, and one forward.
    let selfp = message(0x0100, [1, 0, 0, 0], &[0xc0, 12, 0, 1, 0, 1]);
    assert_eq!(
        Message::parse(&selfp).unwrap_err(),
        DnsError::ForwardPointer(12)
    );
    let fwd = message(0x0100, [1, 0, 0, 0], &[0xc0, 20, 0, 1, 0, 1]);
    assert_eq!(
        Message::parse(&fwd).unwrap_err(),
        DnsError::ForwardPointer(12)
    );
    // A loop of backward pointers through a label: 14 -> 12 -> (label) 14.
    // Offsets: 12: label "a" (2 bytes), 14: pointer to 12.
    let lp = message(0x8180, [1, 0, 0, 0], &[1, b'a', 0xc0, 12, 0, 1, 0, 1]);
    assert_eq!(
        Message::parse(&lp).unwrap_err(),
        DnsError::TooManyPointers(14)
    );
    // Reserved label types.
    let lt = message(0x0100, [1, 0, 0, 0], &[0x41, 0, 0, 1, 0, 1]);
    assert_eq!(
        Message::parse(&lt).unwrap_err(),
        DnsError::LabelType(0x40, 12)
    );
    // A name over 255 bytes.
    let long = vec!["a".repeat(63); 4].join(".");
    assert_eq!(
        Message::parse(&query(&[&long])).unwrap_err(),
        DnsError::NameTooLong(12 + 3 * 64)
    );
}

#[test]
fn tcp_needs_the_whole_message_after_its_length() {
    let q = query(&["example.com"]);
    let mut seg = (q.len() as u16).to_be_bytes().to_vec();
    seg.extend_from_slice(&q);
    assert!(dns::detect(&seg, true).is_ok());
    assert!(dns::detect(&q, false).is_ok());
    // Half a message: the length says more is to come.
    assert_eq!(
        dns::detect(&seg[..10], true).unwrap_err(),
        DnsError::TcpLength(q.len() as u16, 8)
    );
    assert!(dns::detect(&seg, false).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..600), tcp: bool) {
        if let Ok(m) = dns::detect(&b, tcp) {
            let mut v = Vec::new();
            for q in m.questions() {
                m.write_name(q, &mut v);
            }
            prop_assert!(v.len() <= 16 * 256);
        }
    }

    /// Port 53's parser (pointers anywhere, loops cut) is bounded too: every
    /// name and record it walks stays inside the message and short.
    #[test]
    fn random_bytes_never_panic_on_port_53(b in proptest::collection::vec(any::<u8>(), 0..600), tcp: bool) {
        if let Ok(m) = dns::detect_as(&b, tcp, dns::Strictness::Port) {
            let mut v = Vec::new();
            for q in m.questions() {
                let at = v.len();
                m.write_name(q, &mut v);
                prop_assert!(v.len() - at <= 512);
            }
            let mut n = 0;
            m.each_record(|_, owner, data| {
                n += 1;
                m.write_name_at(owner, &mut v);
                if let Some(d) = data {
                    m.write_name_at(d, &mut v);
                }
            });
            prop_assert!(n <= b.len());
        }
    }

    #[test]
    fn mutated_messages_never_panic(
        edits in proptest::collection::vec((any::<u16>(), any::<u8>()), 1..8),
        cut in any::<u16>(),
    ) {
        let mut b = response("www.example.com");
        b.extend_from_slice(&question("x.example.com")[..4]);
        for (at, v) in edits {
            let n = b.len();
            b[at as usize % n] = v;
        }
        let n = b.len();
        b.truncate(cut as usize % (n + 1));
        if let Ok(m) = Message::parse(&b) {
            let mut v = Vec::new();
            for q in m.questions() {
                m.write_name(q, &mut v);
                prop_assert!(v.len() <= 16 * 256);
            }
        }
    }
}

// --- rules ----------------------------------------------------------------

#[test]
fn a_dns_query_rule_fires_on_port_53_and_any_other_port() {
    let rule =
        r#"alert dns any any -> any any (msg:"bad"; dns.query; content:"evil.example"; sid:1;)"#;
    assert_eq!(sids(&[rule], &[udp_query(&["evil.example"], 53)]), vec![1]);
    // DNS is told by content: a resolver on another port is still DNS.
    assert_eq!(
        sids(&[rule], &[udp_query(&["evil.example"], 8053)]),
        vec![1]
    );
    assert_eq!(
        sids(
            &[rule],
            &[udp_v4(C, S, 1000, 40000, &query(&["evil.example"]))]
        ),
        vec![1]
    );
    assert!(sids(&[rule], &[udp_query(&["good.example"], 53)]).is_empty());
}

#[test]
fn a_response_with_the_same_question_does_not_fire() {
    let rule =
        r#"alert dns any any -> any any (msg:"bad"; dns.query; content:"evil.example"; sid:1;)"#;
    let r = udp_v4(S, C, 53, 40000, &response("evil.example"));
    assert!(sids(&[rule], &[r]).is_empty());
    // A rule on the payload alone sees responses too.
    let any = r#"alert dns any any -> any any (msg:"raw"; content:"|04|evil"; sid:2;)"#;
    let r = udp_v4(S, C, 53, 40000, &response("evil.example"));
    assert_eq!(sids(&[any], &[r]), vec![2]);
}

#[test]
fn malformed_payloads_do_not_fire_and_do_not_panic() {
    let rule = r#"alert dns any any -> any any (msg:"bad"; dns.query; content:"evil"; sid:1;)"#;
    let raw = r#"alert dns any any -> any any (msg:"raw"; content:"evil"; sid:2;)"#;
    let ok = query(&["evil.example"]);
    let mut trailing = ok.clone();
    trailing.extend_from_slice(b"xx");
    let frames = vec![
        udp_query(&[], 53),
        udp_v4(C, S, 40000, 53, &ok[..ok.len() - 3]),
        udp_v4(C, S, 40000, 53, b"evil.example but not dns"),
    ];
    for f in frames {
        assert!(sids(&[rule, raw], &[f]).is_empty());
    }
    // Bytes after the last record, and a name whose pointer loops: on port
    // 53 parsed as Suricata does (the extra bytes ignored, the name cut
    // where the loop is noticed), so a query cannot hide behind them;
    // told by content alone elsewhere, not DNS.
    let mut pointer_loop = message(0x0100, [1, 0, 0, 0], &[4, b'e', b'v', b'i', b'l', 0xc0, 12]);
    pointer_loop.extend_from_slice(&[0, 1, 0, 1]);
    for msg in [&trailing, &pointer_loop] {
        assert_eq!(
            sids(&[rule, raw], &[udp_v4(C, S, 40000, 53, msg)]),
            vec![1, 2]
        );
        assert!(sids(&[rule, raw], &[udp_v4(C, S, 40000, 8053, msg)]).is_empty());
    }
}

#[test]
fn nocase_startswith_endswith_on_the_name() {
    assert!(fires(
        r#"dns.query; content:"EVIL.example"; nocase;"#,
        "evil.EXAMPLE"
    ));
    assert!(!fires(
        r#"dns.query; content:"EVIL.example";"#,
        "evil.example"
    ));
    assert!(fires(
        r#"dns.query; content:".example"; endswith;"#,
        "a.evil.example"
    ));
    assert!(!fires(
        r#"dns.query; content:".example"; endswith;"#,
        "a.example.org"
    ));
    assert!(fires(
        r#"dns.query; content:"www."; startswith;"#,
        "www.example"
    ));
    assert!(!fires(
        r#"dns.query; content:"www."; startswith;"#,
        "a.www.example"
    ));
    // depth/offset count from the name's start, not the packet's.
    assert!(fires(
        r#"dns.query; content:"evil"; depth:4;"#,
        "evil.example"
    ));
    assert!(fires(
        r#"dns.query; content:"example"; offset:5;"#,
        "evil.example"
    ));
    assert!(!fires(
        r#"dns.query; content:"example"; offset:6;"#,
        "evil.example"
    ));
    // Relative keywords, negated contents, pcre, isdataat on the buffer.
    assert!(fires(
        r#"dns.query; content:"evil"; content:"example"; distance:1; within:7;"#,
        "evil.example"
    ));
    assert!(fires(
        r#"dns.query; content:"evil"; content:!".org";"#,
        "evil.example"
    ));
    assert!(!fires(
        r#"dns.query; content:"evil"; content:!".org";"#,
        "evil.org"
    ));
    assert!(fires(
        r#"dns.query; pcre:"/^[a-z]+\.example$/";"#,
        "evil.example"
    ));
    assert!(!fires(
        r#"dns.query; pcre:"/^[a-z]+\.example$/";"#,
        "a.evil.example"
    ));
    assert!(fires(
        r#"dns.query; content:"example"; isdataat:!1,relative;"#,
        "evil.example"
    ));
    assert!(!fires(
        r#"dns.query; content:"evil"; isdataat:!1,relative;"#,
        "evil.example"
    ));
}

#[test]
fn bsize_and_dotprefix() {
    assert!(fires(
        r#"dns.query; content:"evil.example"; bsize:12;"#,
        "evil.example"
    ));
    assert!(!fires(
        r#"dns.query; content:"evil.example"; bsize:12;"#,
        "a.evil.example"
    ));
    assert!(fires(
        r#"dns.query; content:"evil"; bsize:>10;"#,
        "evil.example"
    ));
    assert!(!fires(
        r#"dns.query; content:"evil"; bsize:<12;"#,
        "evil.example"
    ));
    assert!(fires(
        r#"dns.query; content:"evil"; bsize:11<>13;"#,
        "evil.example"
    ));
    assert!(!fires(
        r#"dns.query; content:"evil"; bsize:12<>14;"#,
        "evil.example"
    ));
    // With dotprefix the buffer is ".name": ".example" ends both the domain
    // and any subdomain, and no longer matches "badexample".
    let r = r#"dns.query; dotprefix; content:".example"; endswith;"#;
    assert!(fires(r, "example"));
    assert!(fires(r, "a.example"));
    assert!(!fires(r, "badexample"));
    // bsize and dotprefix belong to sticky buffers.
    let e = load(r#"alert dns any any -> any any (content:"a"; bsize:1; sid:1;)"#).unwrap_err();
    assert!(matches!(e, RuleSyntax::UnsupportedKeyword(_)), "{e}");
    let e = load(r#"alert dns any any -> any any (dotprefix; content:"a"; sid:1;)"#).unwrap_err();
    assert!(matches!(e, RuleSyntax::TransformPlacement(_)), "{e}");
}

#[test]
fn the_buffer_is_the_dotted_name_not_the_wire_labels() {
    // On the wire "evil.example" is |04|evil|07|example|00|: a content with a
    // label length matches the packet's payload, not the dotted name.
    let labels =
        r#"alert dns any any -> any any (msg:"l"; dns.query; content:"|07|example"; sid:1;)"#;
    let dotted =
        r#"alert dns any any -> any any (msg:"d"; dns.query; content:"evil.example"; sid:2;)"#;
    let raw = r#"alert udp any any -> any any (msg:"r"; content:"|07|example"; sid:3;)"#;
    let not_raw = r#"alert udp any any -> any any (msg:"n"; content:"evil.example"; sid:4;)"#;
    let mut got = sids(
        &[labels, dotted, raw, not_raw],
        &[udp_query(&["evil.example"], 53)],
    );
    got.sort();
    assert_eq!(got, vec![2, 3]);
}

#[test]
fn each_question_is_inspected_on_its_own() {
    let both = r#"alert dns any any -> any any (msg:"b"; dns.query; content:"alpha"; content:"beta"; sid:1;)"#;
    assert!(sids(
        &[both],
        &[udp_query(&["alpha.example", "beta.example"], 53)]
    )
    .is_empty());
    assert_eq!(
        sids(
            &[both],
            &[udp_query(&["x.example", "alpha.beta.example"], 53)]
        ),
        vec![1]
    );
    // `endswith` holds for the second name, which ends its own buffer.
    let end = r#"alert dns any any -> any any (msg:"e"; dns.query; content:"beta.example"; endswith; sid:2;)"#;
    assert_eq!(
        sids(
            &[end],
            &[udp_query(&["beta.example.org", "beta.example"], 53)]
        ),
        vec![2]
    );
}

#[test]
fn dns_query_mixes_with_payload_keywords() {
    // Before the sticky buffer, after `pkt_data`: the packet's payload.
    let r = r#"alert dns any any -> any any (msg:"m"; content:"|01 00 00 01|"; offset:2; depth:4; dns.query; content:"evil"; pkt_data; content:"|00 01 00 01|"; sid:1;)"#;
    let rule = load(r).unwrap();
    assert_eq!(rule.items.len(), 2);
    assert_eq!(rule.dns_query[0].items.len(), 1);
    assert_eq!(sids(&[r], &[udp_query(&["evil.example"], 53)]), vec![1]);
    // A response: the payload matches, not the header's flags.
    let mut q = query(&["evil.example"]);
    q[2] = 0x81;
    assert!(sids(&[r], &[udp_v4(C, S, 40000, 53, &q)]).is_empty());
}

#[test]
fn dns_over_tcp_in_one_segment() {
    let rule =
        r#"alert dns any any -> any any (msg:"t"; dns.query; content:"evil.example"; sid:1;)"#;
    let q = query(&["evil.example"]);
    let mut seg = (q.len() as u16).to_be_bytes().to_vec();
    seg.extend_from_slice(&q);
    let mut frames = vec![
        tcp_v4(C, S, 40000, 53, 1000, 0, SYN, &[]),
        tcp_v4(S, C, 53, 40000, 9000, 1001, SYN | ACK, &[]),
        tcp_v4(C, S, 40000, 53, 1001, 9001, ACK, &[]),
    ];
    frames.push(tcp_v4(C, S, 40000, 53, 1001, 9001, ACK | PSH, &seg));
    assert_eq!(sids(&[rule], &frames), vec![1]);
    // Split across two segments: the first part waits pending, the whole
    // message is inspected.
    frames.pop();
    let (a, b) = seg.split_at(9);
    frames.push(tcp_v4(C, S, 40000, 53, 1001, 9001, ACK | PSH, a));
    frames.push(tcp_v4(
        C,
        S,
        40000,
        53,
        1001 + a.len() as u32,
        9001,
        ACK | PSH,
        b,
    ));
    assert_eq!(sids(&[rule], &frames), vec![1]);
}

#[test]
fn alerts_and_drops_through_the_function() {
    let rules = [
        r#"alert dns $HOME_NET any -> any any (msg:"seen"; dns.query; content:"tracker.example"; nocase; endswith; sid:10; rev:2; classtype:bad-unknown;)"#,
        r#"drop dns any any -> any any (msg:"blocked"; dns.query; content:"malware.example"; endswith; sid:11;)"#,
    ];
    let mut i = ips(&rules);
    let mut st = LocalStore::new();
    let frames = vec![
        udp_query(&["ads.TRACKER.example"], 53),
        udp_v4(C, S, 40001, 53, &query(&["c2.malware.example"])),
        udp_query(&["www.example"], 53),
    ];
    let (alerts, dropped) = common::run_in(&mut i, &mut st, &frames, 1_000_000_000);
    assert_eq!(
        alerts,
        vec![(10, AlertAction::Allowed), (11, AlertAction::Blocked)]
    );
    assert_eq!(dropped, vec![false, true, false]);
    // The header's addresses still apply: a client outside HOME_NET.
    let outside = udp_v4([8, 8, 8, 8], S, 40000, 53, &query(&["tracker.example"]));
    let (alerts, _) = common::run_in(&mut i, &mut st, &[outside], 2_000_000_000);
    assert!(alerts.is_empty());
}

/// Rule lines copied from ET Open (`../shared/data/et-open/`).
const ET: &[&str] = &[
    r#"alert dns $HOME_NET any -> any any (msg:"ET ADWARE_PUP Lookup of Malware Domain twothousands.cm Likely Infection"; dns.query; content:"twothousands.cm"; depth:15; fast_pattern; endswith; nocase; classtype:pup-activity; sid:2012176; rev:6; metadata:created_at 2011_01_13, former_category ADWARE_PUP, updated_at 2020_09_17;)"#,
    r#"alert dns $HOME_NET any -> any any (msg:"ET MOBILE_MALWARE Android.Trojan.Rana.A (wherisdomaintv .com in DNS Lookup)"; dns_query; content:"wherisdomaintv.com"; isdataat:!1,relative; reference:url,blog.reversinglabs.com/hubfs/Blog/rana_android_malware/; classtype:domain-c2; sid:2031309; rev:2; metadata:affected_product Android, attack_target Mobile_Client, created_at 2020_12_09, deployment Perimeter, former_category MOBILE_MALWARE, signature_severity Critical, tag Android, updated_at 2020_12_09;)"#,
    r#"alert dns $HOME_NET any -> any any (msg:"ET ADWARE_PUP Observed DNS Query to DriverPack Domain ( .drp .su)"; dns.query; dotprefix; content:".drp.su"; nocase; endswith; reference:md5,63181b2e347fbe0faf02e26085513a05; classtype:pup-activity; sid:2037895; rev:1; metadata:affected_product Windows_XP_Vista_7_8_10_Server_32_64_Bit, attack_target Client_Endpoint, created_at 2022_08_02, deployment Perimeter, malware_family PUP, performance_impact Low, signature_severity Informational, updated_at 2022_08_02;)"#,
    r#"alert dns $HOME_NET any -> any any (msg:"ET ADWARE_PUP Observed DNS Query to Malvertising Related Domain"; dns.query; content:"gdprcountryrestriction.com"; nocase; bsize:26; reference:url,duo.com/labs/research/crxcavator-malvertising-2020; classtype:pup-activity; sid:2030014; rev:2; metadata:attack_target Client_Endpoint, created_at 2020_04_23, deployment Perimeter, former_category ADWARE_PUP, performance_impact Low, signature_severity Minor, updated_at 2020_11_17;)"#,
    r#"alert dns $HOME_NET any -> any any (msg:"ET HUNTING Suspicious Glitch Hosted DNS Request - Possible Phishing Landing"; dns.query; content:".glitch.me"; pcre:"/^[a-z]+\-[a-z]+\-[a-z]+\.glitch\.me$/"; classtype:social-engineering; sid:2031918; rev:1; metadata:affected_product Web_Browsers, attack_target Client_Endpoint, created_at 2021_03_10, deployment Perimeter, former_category HUNTING, signature_severity Critical, tag Phishing, updated_at 2021_03_10, mitre_tactic_id TA0001, mitre_tactic_name Initial_Access, mitre_technique_id T1566, mitre_technique_name Phishing;)"#,
    r#"alert dns $HOME_NET any -> any any (msg:"ET HUNTING File Sharing Related Domain in DNS Lookup (download .mediafire .com)"; dns.query; content:"download"; startswith; content:".mediafire.com"; endswith; classtype:bad-unknown; sid:2036936; rev:1; metadata:attack_target Client_Endpoint, created_at 2022_06_09, deployment Perimeter, former_category HUNTING, signature_severity Informational, updated_at 2022_06_09;)"#,
];

#[test]
fn et_open_dns_rules_fire_on_crafted_queries() {
    let cases: &[(&str, Option<u32>)] = &[
        ("TwoThousands.CM", Some(2012176)),
        ("x.twothousands.cm", None), // depth:15 from the name's start
        ("wherisdomaintv.com", Some(2031309)),
        ("wherisdomaintv.com.evil", None),
        ("drp.su", Some(2037895)),
        ("files.DRP.su", Some(2037895)),
        ("notdrp.su", None),
        ("gdprcountryrestriction.com", Some(2030014)),
        ("a.gdprcountryrestriction.com", None), // bsize:26
        ("red-blue-green.glitch.me", Some(2031918)),
        ("red.glitch.me", None),
        ("download1234.mediafire.com", Some(2036936)),
        ("www.download.mediafire.com", None),
    ];
    for (name, want) in cases {
        let got = sids(ET, &[udp_query(&[name], 53)]);
        assert_eq!(got, want.iter().copied().collect::<Vec<_>>(), "{name}");
    }
}

#[test]
fn other_dns_keywords_stay_skipped_with_their_name() {
    for (opts, reason) in [
        (
            r#"dns.answer.name; content:"a"; http.uri;"#,
            "keyword http.uri on a dns rule",
        ),
        (
            r#"dns.query; content:"a"; to_lowercase;"#,
            "error: transform",
        ),
        (
            r#"dns.query; content:"a"; http_uri;"#,
            "keyword http_uri on a dns rule",
        ),
    ] {
        let e = load(&format!("alert dns any any -> any any ({opts} sid:1;)")).unwrap_err();
        assert_eq!(e.reason(), reason, "{opts}");
    }
    // The header keywords load on DNS rules only.
    assert!(load("alert dns any any -> any any (dns.opcode:1; dns.rrtype:1; sid:1;)").is_ok());
    let e = load("alert udp any any -> any any (dns.rcode:3; sid:1;)").unwrap_err();
    assert_eq!(e.reason(), "keyword dns.rcode on a udp rule");
    // `dns.query` makes a DNS rule; on a udp rule it is refused, named.
    let e = load(r#"alert udp any any -> any any (dns.query; content:"a"; sid:1;)"#).unwrap_err();
    assert_eq!(e.reason(), "keyword dns.query on a udp rule");
}

/// A UDP flow is established once traffic went both ways, as in Suricata
/// (ET's `flow:established,to_server` DNS rules): a first query is not, the
/// response that answers it is, and so is the next query on the same flow,
/// in the same batch or a later one, whichever port is the higher; a
/// `not_established` rule fires on the first query only. Over TCP the
/// handshake decides, as for any stream.
#[test]
fn udp_flows_are_established_once_both_directions_were_seen() {
    let est = r#"alert dns $HOME_NET any -> any any (flow:established,to_server; dns.query; content:"evil"; sid:1;)"#;
    let not = r#"alert dns any any -> any any (flow:not_established,to_server; dns.query; content:"evil"; sid:2;)"#;
    let resp = r#"alert udp any any -> $HOME_NET any (flow:established,to_client; content:"evil"; sid:3;)"#;
    let q = || udp_v4(C, S, 40000, 53, &query(&["evil.example"]));
    let r = || udp_v4(S, C, 53, 40000, &response("evil.example"));
    assert_eq!(sids(&[est, not, resp], &[q()]), vec![2]);
    assert_eq!(sids(&[est, not, resp], &[q(), r(), q()]), vec![2, 3, 1]);
    // Across batches, through the flow's record.
    let (mut i, mut st) = (ips(&[est, not, resp]), LocalStore::new());
    let mut fired = Vec::new();
    for (k, f) in [q(), r(), q()].into_iter().enumerate() {
        let (a, _) = common::run_in(&mut i, &mut st, &[f], 1_000_000_000 + k as u64 * 1_000);
        fired.extend(a.into_iter().map(|a| a.0));
    }
    assert_eq!(fired, vec![2, 3, 1]);
    // Another flow (another client port) starts over.
    let other = udp_v4(C, S, 40001, 53, &query(&["evil.example"]));
    assert_eq!(sids(&[est, not], &[q(), r(), other]), vec![2, 2]);
    // Equal ports (server to server on 53): established all the same.
    let a = udp_v4(C, S, 53, 53, &query(&["evil.example"]));
    let b = udp_v4(S, C, 53, 53, &response("evil.example"));
    let both =
        r#"alert dns any any -> any any (flow:established; dns.query; content:"evil"; sid:4;)"#;
    assert_eq!(sids(&[both], &[a.clone(), b, a]), vec![4]);
    // Still refused where nothing tracks it.
    let e = load("alert icmp any any -> any any (flow:established; sid:1;)").unwrap_err();
    assert_eq!(e.reason(), "flow established on icmp");
}

/// The ET Open rule set, if present (`../shared/data/et-open/`, not in the
/// repository): almost every `dns` rule loads, and those that do not are
/// skipped for a named keyword, never for their protocol.
#[test]
fn et_open_dns_rules_load() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../../shared/data/et-open");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!("ET Open rules absent at {}: not checked", dir.display());
        return;
    };
    let vars = rules::suricata_default_vars();
    let (mut loaded, mut total) = (0, 0);
    let mut reasons = std::collections::BTreeMap::<String, usize>::new();
    for e in entries {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "rules") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        for line in text.lines().filter(|l| l.starts_with("alert dns ")) {
            total += 1;
            match rules::parse_rule(line, &vars) {
                Ok(_) => loaded += 1,
                Err(e) => *reasons.entry(e.reason()).or_default() += 1,
            }
        }
    }
    eprintln!("ET Open dns rules: {loaded} of {total} load; skipped {reasons:?}");
    assert!(total > 3900, "{total}");
    assert!(
        loaded * 100 >= total * 98,
        "{loaded} of {total}: {reasons:?}"
    );
    assert!(!reasons.contains_key("protocol dns"));
    // And all of them compile into one IPS.
    let mut all = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "rules") {
            let text = std::fs::read_to_string(&p).unwrap();
            let dns: String = text
                .lines()
                .filter(|l| l.starts_with("alert dns "))
                .collect::<Vec<_>>()
                .join("\n");
            all.extend(rules::parse_rules(&dns, "et", &vars).0);
        }
    }
    let n = all.len();
    let mut i = Ips::new(all, vec![], sluice_state::Namespace(2), 300).unwrap();
    assert_eq!(n, loaded);
    let (alerts, _) = common::run_in(
        &mut i,
        &mut LocalStore::new(),
        &[udp_query(&["appsdown.urbanvillager.xyz"], 53)],
        1_000_000_000,
    );
    assert!(alerts.iter().any(|a| a.0 == 2029107), "{alerts:?}");
}

/// A DNS-over-TCP connection to port 53: the handshake, then each client
/// segment in order.
fn tcp_conn(segs: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut frames = vec![
        tcp_v4(C, S, 40000, 53, 1000, 0, SYN, &[]),
        tcp_v4(S, C, 53, 40000, 9000, 1001, SYN | ACK, &[]),
        tcp_v4(C, S, 40000, 53, 1001, 9001, ACK, &[]),
    ];
    let mut seq = 1001u32;
    for s in segs {
        frames.push(tcp_v4(C, S, 40000, 53, seq, 9001, ACK | PSH, s));
        seq += s.len() as u32;
    }
    frames
}

/// `msg` after its 2-byte length.
fn framed(msg: &[u8]) -> Vec<u8> {
    let mut v = (msg.len() as u16).to_be_bytes().to_vec();
    v.extend_from_slice(msg);
    v
}

fn sorted(mut v: Vec<u32>) -> Vec<u32> {
    v.sort_unstable();
    v
}

#[test]
fn a_tcp_query_split_at_every_byte_fires_the_same_rules() {
    // Two questions (one for each of two ET Open rules), then a second
    // query on the same connection (RFC 7766 reuse).
    let first = framed(&query(&["drp.su", "gdprcountryrestriction.com"]));
    let second = framed(&query(&["red-blue-green.glitch.me"]));
    let whole = sorted(sids(ET, &tcp_conn(&[first.clone(), second.clone()])));
    assert_eq!(whole, vec![2030014, 2031918, 2037895]);
    for cut in 1..first.len() {
        let mut segs = common::pieces(&first, &[cut]);
        segs.push(second.clone());
        assert_eq!(sorted(sids(ET, &tcp_conn(&segs))), whole, "cut at {cut}");
        let (a, _, c) = batched(ET, &tcp_conn(&segs));
        assert_eq!(sorted(a), whole, "cut at {cut}, batched");
        assert_eq!(c.pending_discarded + c.pending_lost, 0);
    }
    // The second message split too: it starts where the first ended.
    for cut in 1..second.len() {
        let mut segs = vec![first.clone()];
        segs.extend(common::pieces(&second, &[cut]));
        let (a, _, _) = batched(ET, &tcp_conn(&segs));
        assert_eq!(sorted(a), whole, "second cut at {cut}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn a_tcp_query_cut_anywhere_fires_the_same_rules(cuts in proptest::collection::vec(1usize..60, 0..8)) {
        let q = framed(&query(&["drp.su", "gdprcountryrestriction.com"]));
        let whole = sorted(sids(ET, &tcp_conn(std::slice::from_ref(&q))));
        let mut cuts = cuts;
        cuts.sort_unstable();
        let (a, _, _) = batched(ET, &tcp_conn(&common::pieces(&q, &cuts)));
        prop_assert_eq!(sorted(a), whole);
    }
}

#[test]
fn a_split_tcp_query_continues_on_another_instance_and_drops() {
    let rule =
        r#"drop dns any any -> any any (msg:"t"; dns.query; content:"evil.example"; sid:51;)"#;
    let q = framed(&query(&["evil.example"]));
    let mut frames = tcp_conn(&common::pieces(&q, &[7]));
    frames.push(tcp_v4(
        C,
        S,
        40000,
        53,
        1001 + q.len() as u32,
        9001,
        ACK | PSH,
        b"xx",
    ));
    let mut st = LocalStore::new();
    let (a, d) = common::run_in(&mut ips(&[rule]), &mut st, &frames[..4], 1_000_000_000);
    assert!(a.is_empty());
    assert_eq!(d, vec![false; 4]);
    let mut other = ips(&[rule]);
    let (a, d) = common::run_in(&mut other, &mut st, &frames[4..], 2_000_000_000);
    assert_eq!(a, vec![(51, AlertAction::Blocked)]);
    // The packet completing the message and every later one.
    assert_eq!(d, vec![true, true]);
}

#[test]
fn a_stream_that_is_not_dns_keeps_nothing_pending() {
    let rule = r#"alert dns any any -> any any (msg:"t"; dns.query; content:"x"; sid:52;)"#;
    // A length prefix, then bytes that are no DNS header.
    let junk = b"\x01\x00\xff\xff\xff\xff\xff\xff".to_vec();
    let (a, _, c) = batched(&[rule], &tcp_conn(&[junk, b"more bytes".to_vec()]));
    assert!(a.is_empty());
    assert_eq!(c.pending_saved, 0);
    // Bulk bytes after the stream's start are never taken for a message's
    // start, whatever they hold.
    let q = framed(&query(&["x.example"]));
    let (_, _, c) = batched(&[rule], &tcp_conn(&[b"hello".to_vec(), q[..5].to_vec()]));
    assert_eq!(c.pending_saved, 1, "only the first segment's");
}

/// [`common::run_each`] with an IPS of `rules`.
fn batched(rules: &[&str], frames: &[Vec<u8>]) -> (Vec<u32>, Vec<bool>, sluice_ips::Counters) {
    common::run_each(ips(rules), frames)
}

#[test]
fn dns_query_named_twice_may_match_two_questions() {
    // Suricata's documentation ("Multiple Buffer Matching"): one query with
    // two questions, each instance of the buffer matched on its own.
    let rule = r#"alert dns any any -> any any (dns.query; content:"example"; dns.query; content:".com"; sid:1;)"#;
    assert_eq!(
        sids(&[rule], &[udp_query(&["example.net", "something.com"], 53)]),
        vec![1]
    );
    // One name alone must still hold each instance's keywords.
    assert!(sids(&[rule], &[udp_query(&["example.net"], 53)]).is_empty());
    // Each instance keeps its transforms.
    let rule = r#"alert dns any any -> any any (dns.query; dotprefix; content:".microsoft.com"; endswith; dns.query; content:"microsoft.com"; startswith; sid:1;)"#;
    assert_eq!(
        sids(
            &[rule],
            &[udp_query(&["update.microsoft.com", "microsoft.com.au"], 53)]
        ),
        vec![1]
    );
    assert!(sids(&[rule], &[udp_query(&["update.microsoft.com"], 53)]).is_empty());
    let rule = r#"alert dns any any -> any any (dns.query; to_uppercase; content:"EVIL"; dns.query; content:"EVIL"; sid:1;)"#;
    assert!(sids(&[rule], &[udp_query(&["evil.example"], 53)]).is_empty());
    assert_eq!(sids(&[rule], &[udp_query(&["EVIL.example"], 53)]), vec![1]);
}

/// A response for `a.example`: answers CNAME `b.example` (owner: a pointer
/// to the question) and MX 10 `mx.example`, authority SOA whose primary
/// server is `ns1.example`, additional A `glue.example`.
fn records_response() -> Vec<u8> {
    let rr = |owner: &[u8], ty: u16, data: &[u8]| {
        let mut r = owner.to_vec();
        r.extend_from_slice(&ty.to_be_bytes());
        r.extend_from_slice(&[0, 1, 0, 0, 0, 60]);
        r.extend_from_slice(&(data.len() as u16).to_be_bytes());
        r.extend_from_slice(data);
        r
    };
    let q = [0xc0, 12];
    let mut body = question("a.example");
    body.extend(rr(&q, 5, &wire_name("b.example")));
    body.extend(rr(
        &wire_name("b.example"),
        15,
        &[[0, 10].as_slice(), &wire_name("mx.example")].concat(),
    ));
    let mut soa = wire_name("ns1.example");
    soa.extend(wire_name("admin.example"));
    soa.extend_from_slice(&[0; 20]);
    body.extend(rr(&wire_name("example"), 6, &soa));
    body.extend(rr(&wire_name("glue.example"), 1, &[192, 0, 2, 1]));
    message(0x8180, [1, 2, 1, 1], &body)
}

#[test]
fn response_record_names() {
    let resp = udp_v4(S, C, 53, 40000, &records_response());
    let fires = |opts: &str| {
        let rule = format!("alert dns any any -> any any ({opts} sid:1;)");
        sids(&[&rule], std::slice::from_ref(&resp)) == vec![1]
    };
    // dns.response.rrname: questions, owners and name data in every section.
    for (name, all, answers, auth, add) in [
        ("a.example", true, true, false, false),
        ("b.example", true, true, false, false),
        ("mx.example", true, false, false, false),
        ("ns1.example", true, false, false, false),
        ("glue.example", true, false, false, true),
        ("admin.example", false, false, false, false),
    ] {
        let c = format!("content:\"{name}\"; startswith; endswith;");
        assert_eq!(fires(&format!("dns.response.rrname; {c}")), all, "{name}");
        assert_eq!(
            fires(&format!("dns.answers.rrname; {c}")),
            answers,
            "{name}"
        );
        assert_eq!(
            fires(&format!("dns.authorities.rrname; {c}")),
            auth,
            "{name}"
        );
        assert_eq!(
            fires(&format!("dns.additionals.rrname; {c}")),
            add,
            "{name}"
        );
    }
    // The SOA's owner is the authority's name.
    assert!(fires(
        "dns.authorities.rrname; content:\"example\"; startswith; endswith;"
    ));
    // Requests have no records: nothing to match.
    assert!(sids(
        &["alert dns any any -> any any (dns.response.rrname; content:\"a.example\"; sid:1;)"],
        &[udp_query(&["a.example"], 53)]
    )
    .is_empty());
    // Each instance on its own record; transforms apply.
    assert!(fires(
        "dns.response.rrname; content:\"mx.\"; dns.response.rrname; to_uppercase; content:\"NS1\";"
    ));
}

/// On port 53 a message is parsed as Suricata's DNS parser does, so a
/// query cannot hide from the DNS rules behind header bits resolvers never
/// set, more than 16 questions, a forward compression pointer or a second
/// message in the same segment; told by content on another port, such
/// bytes are not DNS.
#[test]
fn on_port_53_odd_messages_are_parsed_as_suricata_does() {
    use sluice_ips::dns::Strictness;
    let rule = r#"alert dns any any -> any any (dns.query; content:"evil.example"; sid:1;)"#;
    let mut z = query(&["evil.example"]);
    z[3] |= 0x40; // the reserved Z bit
    let mut rc = query(&["evil.example"]);
    rc[3] |= 0x05; // a response code in a query
    let mut names: Vec<String> = (0..16).map(|i| format!("q{i}.example")).collect();
    names.push("evil.example".into());
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let many = query(&names);
    // A question whose name is a pointer forward, to a name after it.
    let mut fwd = message(0x0100, [1, 0, 0, 0], &[0xc0, 18, 0, 1, 0, 1]);
    fwd.extend_from_slice(&wire_name("evil.example"));
    for (what, m) in [
        ("z bit", &z),
        ("rcode", &rc),
        ("17 questions", &many),
        ("forward", &fwd),
    ] {
        assert!(Message::parse_as(m, Strictness::Port).is_ok(), "{what}");
        assert!(Message::parse(m).is_err(), "{what}");
        assert_eq!(
            sids(&[rule], &[udp_v4(C, S, 40000, 53, m)]),
            vec![1],
            "{what}"
        );
        assert!(
            sids(&[rule], &[udp_v4(C, S, 40000, 8053, m)]).is_empty(),
            "{what}"
        );
    }
    // A pointer at itself is never followed.
    let own = message(0x0100, [1, 0, 0, 0], &[0xc0, 12, 0, 1, 0, 1]);
    assert_eq!(
        Message::parse_as(&own, Strictness::Port).unwrap_err(),
        DnsError::ForwardPointer(12)
    );
    // The root's empty name is no buffer, and Suricata's walk of the
    // questions stops there: the name after it is not inspected.
    let root_first = query(&["", "evil.example"]);
    assert!(sids(&[rule], &[udp_v4(C, S, 40000, 53, &root_first)]).is_empty());
    let root_last = query(&["evil.example", ""]);
    assert_eq!(
        sids(&[rule], &[udp_v4(C, S, 40000, 53, &root_last)]),
        vec![1]
    );
    let empty = r#"alert dns any any -> any any (dns.query; bsize:0; sid:2;)"#;
    assert!(sids(&[empty], &[udp_v4(C, S, 40000, 53, &root_first)]).is_empty());
}
