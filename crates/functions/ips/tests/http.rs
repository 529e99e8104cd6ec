//! HTTP/1.x: detection by content whatever the port, the framing kept in the
//! flow record (pipelining, bodies by length and chunked, two instances
//! sharing a store), the sticky buffers and Snort-style modifiers with
//! Suricata's semantics, and a parser that never panics on hostile bytes.
//! Requests are written as text; the TCP/IP layers by `sluice_wire::build`.

use std::path::Path;

use proptest::prelude::*;
use sluice_ips::http::{Buf, Buffers, HttpDir, Phase, Piece};
use sluice_ips::rules::{self, parse_rule, Proto};
use sluice_ips::Ips;
use sluice_nf::AlertAction;
use sluice_state::LocalStore;
use sluice_wire::build::tcp_v4;
use sluice_wire::tcp::flags::{ACK, PSH, SYN};

mod common;

const C: [u8; 4] = [10, 0, 0, 1];
const S: [u8; 4] = [192, 168, 1, 2];

fn ips(rules: &[&str]) -> Ips {
    common::ips_with(rules, &[("HOME_NET", "10.0.0.0/8")])
}

/// A connection to `port`: the handshake, then each of `client` (to the
/// server) and `server` (answers) as segments in order, `(to_server, bytes)`.
fn conn(port: u16, segs: &[(bool, &[u8])]) -> Vec<Vec<u8>> {
    let mut f = vec![
        tcp_v4(C, S, 40000, port, 1000, 0, SYN, &[]),
        tcp_v4(S, C, port, 40000, 9000, 1001, SYN | ACK, &[]),
        tcp_v4(C, S, 40000, port, 1001, 9001, ACK, &[]),
    ];
    let (mut cs, mut ss) = (1001u32, 9001u32);
    for (to_server, b) in segs {
        if *to_server {
            f.push(tcp_v4(C, S, 40000, port, cs, ss, ACK | PSH, b));
            cs += b.len() as u32;
        } else {
            f.push(tcp_v4(S, C, port, 40000, ss, cs, ACK | PSH, b));
            ss += b.len() as u32;
        }
    }
    f
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

const GET: &[u8] = b"GET /index.php?id=%41%42&x=1 HTTP/1.1\r\nHost: WWW.Example.COM:8080\r\nUser-Agent: Evil-Agent/1.0\r\nCookie: session=abc\r\nAccept: */*\r\n\r\n";

/// True if a rule with `opts` (sid 1, to server) fires on `req` sent to port 80.
fn fires(opts: &str, req: &[u8]) -> bool {
    let rule = format!(
        "alert http any any -> any any (msg:\"t\"; flow:established,to_server; {opts} sid:1;)"
    );
    sids(&[&rule], &conn(80, &[(true, req)])) == vec![1]
}

#[test]
fn http_rules_parse_into_buffers() {
    let r = parse_rule(
        r#"alert http any any -> any any (http.method; content:"POST"; http.uri; content:"/a"; startswith; content:"b"; distance:0; pcre:"/x/U"; content:"ua"; http_user_agent; urilen:>5; sid:1;)"#,
        &Default::default(),
    )
    .unwrap();
    assert_eq!(r.proto, Proto::Http);
    let bufs: Vec<(Buf, usize)> = r.http.iter().map(|l| (l.buf, l.items.len())).collect();
    // The modifier moved "ua" out of the uri buffer; pcre /U and urilen
    // joined it.
    assert_eq!(
        bufs,
        vec![(Buf::Method, 1), (Buf::Uri, 4), (Buf::UserAgent, 1)]
    );
    assert!(r.items.is_empty());
    // A tcp rule with an http buffer becomes an http rule (Suricata).
    let r = parse_rule(
        r#"alert tcp any any -> any any (file_data; content:"x"; sid:2;)"#,
        &Default::default(),
    )
    .unwrap();
    assert_eq!(r.proto, Proto::Http);
    // Not on dns or udp.
    assert!(parse_rule(
        r#"alert udp any any -> any any (http.uri; content:"x"; sid:3;)"#,
        &Default::default()
    )
    .is_err());
}

#[test]
fn requests_on_port_80_and_any_other_port() {
    let rule = r#"alert http any any -> any any (msg:"t"; flow:established,to_server; http.uri; content:"/index.php"; sid:7;)"#;
    for port in [80, 8080, 4444] {
        assert_eq!(
            sids(&[rule], &conn(port, &[(true, GET)])),
            vec![7],
            "{port}"
        );
    }
    // Not HTTP on port 80: the same bytes after some other text.
    let mut junk = b"HELLO\r\n".to_vec();
    junk.extend_from_slice(GET);
    assert!(sids(&[rule], &conn(80, &[(true, &junk)])).is_empty());
    // A tcp rule with the content in the payload still fires on it.
    let tcp = r#"alert tcp any any -> any 80 (msg:"t"; content:"/index.php"; sid:8;)"#;
    assert_eq!(sids(&[tcp], &conn(80, &[(true, &junk)])), vec![8]);
}

#[test]
fn each_request_buffer() {
    assert!(fires(r#"http.method; content:"GET"; bsize:3;"#, GET));
    assert!(!fires(r#"http.method; content:"POST";"#, GET));
    // Normalised: %41%42 decoded; raw: as sent.
    assert!(fires(r#"http.uri; content:"id=AB&";"#, GET));
    assert!(!fires(r#"http.uri; content:"%41";"#, GET));
    assert!(fires(r#"http.uri.raw; content:"id=%41%42";"#, GET));
    assert!(fires(r#"content:"id=%41"; http_raw_uri;"#, GET));
    assert!(!fires(r#"http.uri.raw; content:"id=AB";"#, GET));
    // Host: lowercased, without the port; raw as sent.
    assert!(fires(
        r#"http.host; content:"www.example.com"; bsize:15;"#,
        GET
    ));
    assert!(!fires(r#"http.host; content:"Example";"#, GET));
    assert!(fires(r#"http.host.raw; content:"Example.COM:8080";"#, GET));
    assert!(fires(
        r#"http.user_agent; content:"Evil-Agent"; startswith;"#,
        GET
    ));
    assert!(fires(
        r#"content:"evil-agent"; nocase; http_user_agent;"#,
        GET
    ));
    assert!(fires(
        r#"http.cookie; content:"session=abc"; startswith; bsize:11;"#,
        GET
    ));
    assert!(fires(
        r#"http.request_line; content:"GET /index.php?id=%41%42&x=1 HTTP/1.1"; bsize:37;"#,
        GET
    ));
    // The header buffer: "Name: value\r\n" each, no request line.
    assert!(fires(
        r#"http.header; content:"Host|3a 20|WWW.Example.COM:8080|0d 0a|User-Agent";"#,
        GET
    ));
    assert!(!fires(r#"http.header; content:"GET";"#, GET));
    assert!(fires(
        r#"http.header_names; content:"|0d 0a|Host|0d 0a|User-Agent|0d 0a|Cookie|0d 0a|";"#,
        GET
    ));
    assert!(fires(r#"http.accept; content:"*/*"; bsize:3;"#, GET));
    assert!(fires(
        r#"http.host; dotprefix; content:".example.com"; endswith;"#,
        GET
    ));
    assert!(!fires(
        r#"http.host; dotprefix; content:".ample.com"; endswith;"#,
        GET
    ));
    assert!(fires(
        r#"http.host; dotprefix; content:".example.com"; startswith;"#,
        b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"
    ));
    assert!(fires(r#"http.protocol; content:"HTTP/1.1";"#, GET));
    assert!(fires(
        r#"http.start; content:"GET /"; startswith; content:"|0d 0a 0d 0a|"; endswith;"#,
        GET
    ));
    // urilen on the normalised target (20 bytes) and raw (24).
    assert!(fires("urilen:20;", GET));
    assert!(fires("urilen:24,raw;", GET));
    assert!(!fires("urilen:>20;", GET));
    // pcre flags choose the buffer.
    assert!(fires(r#"pcre:"/^\/index\.php\?id=AB/U";"#, GET));
    assert!(fires(r#"pcre:"/id=%41/I";"#, GET));
    assert!(fires(r#"pcre:"/^www\.example\.com$/W";"#, GET));
    assert!(fires(r#"pcre:"/^GET$/M";"#, GET));
    assert!(fires(r#"pcre:"/^Evil/V";"#, GET));
    assert!(fires(r#"pcre:"/^session/C";"#, GET));
    assert!(fires(r#"pcre:"/User-Agent: Evil/H";"#, GET));
    // An absent buffer matches nothing (no Referer).
    assert!(!fires(r#"http.referer; content:"x";"#, GET));
    assert!(!fires(r#"http.referer; content:!"x";"#, GET));
}

#[test]
fn content_modifiers_on_a_buffer() {
    // offset/depth count from the buffer start, not the stream's.
    assert!(fires(
        r#"http.uri; content:"index"; offset:1; depth:5;"#,
        GET
    ));
    assert!(!fires(r#"http.uri; content:"index"; offset:2;"#, GET));
    assert!(fires(
        r#"http.uri; content:"/index"; content:"id="; distance:5; within:3;"#,
        GET
    ));
    assert!(!fires(
        r#"http.uri; content:"/index"; content:"id="; distance:6;"#,
        GET
    ));
    assert!(fires(r#"http.uri; content:"x=1"; endswith;"#, GET));
    assert!(!fires(r#"http.uri; content:"/index"; endswith;"#, GET));
    assert!(fires(
        r#"http.uri; content:"/INDEX.PHP"; nocase; startswith;"#,
        GET
    ));
    assert!(!fires(r#"http.uri; content:"/INDEX.PHP";"#, GET));
    // Several buffers: all must match the same message.
    assert!(fires(
        r#"http.method; content:"GET"; http.uri; content:".php"; http.host; content:"example";"#,
        GET
    ));
    assert!(!fires(
        r#"http.method; content:"GET"; http.uri; content:".php"; http.host; content:"other";"#,
        GET
    ));
}

const RESP: &[u8] = b"HTTP/1.1 200 OK\r\nServer: nginx/1.2\r\nContent-Type: text/html\r\nContent-Length: 20\r\nSet-Cookie: id=7\r\n\r\n<html>evil();</html>";

#[test]
fn responses_and_bodies() {
    let r = |opts: &str| {
        format!(
            "alert http any any -> any any (msg:\"t\"; flow:established,to_client; {opts} sid:2;)"
        )
    };
    let run = |opts: &str| sids(&[&r(opts)], &conn(80, &[(true, GET), (false, RESP)])) == vec![2];
    assert!(run(r#"http.stat_code; content:"200"; bsize:3;"#));
    assert!(!run(r#"http.stat_code; content:"404";"#));
    assert!(run(r#"http.stat_msg; content:"OK";"#));
    assert!(run(
        r#"http.response_line; content:"HTTP/1.1 200 OK"; bsize:15;"#
    ));
    assert!(run(r#"http.server; content:"nginx";"#));
    assert!(run(r#"http.content_type; content:"text/html";"#));
    assert!(run(r#"http.content_len; content:"20";"#));
    // byte_test of 0 string bytes: the whole buffer as a number.
    assert!(run("http.content_len; byte_test:0,>=,20,0,string,dec;"));
    assert!(!run("http.content_len; byte_test:0,>,20,0,string,dec;"));
    assert!(run(r#"http.cookie; content:"id=7";"#));
    assert!(run(
        r#"file_data; content:"<html>"; startswith; content:"evil"; distance:0;"#
    ));
    assert!(run(r#"http.response_body; content:"</html>"; endswith;"#));
    assert!(run(
        r#"http.stat_code; content:"200"; file.data; content:"evil();";"#
    ));
    assert!(!run(r#"http.request_body; content:"evil";"#));
    // A response without a request first is not parsed.
    let rule = r(r#"http.stat_code; content:"200";"#);
    assert!(sids(&[&rule], &conn(80, &[(false, RESP)])).is_empty());
    // A request body, by Content-Length.
    let post = b"POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\nhello=world";
    assert!(fires(
        r#"http.request_body; content:"hello=world"; bsize:11;"#,
        post
    ));
    assert!(fires(r#"content:"hello"; http_client_body;"#, post));
    assert!(fires(r#"pcre:"/^hello/P";"#, post));
    assert!(fires(
        r#"http.method; content:"POST"; file_data; content:"world";"#,
        post
    ));
}

#[test]
fn chunked_bodies_are_framed() {
    let rule = r#"alert http any any -> any any (msg:"t"; flow:to_client; file_data; content:"HelloWorld"; sid:3;)"#;
    let second = r#"alert http any any -> any any (msg:"t"; flow:to_server; http.uri; content:"/second"; sid:4;)"#;
    let resp = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nHello\r\n5\r\nWorld\r\n0\r\n\r\n";
    let req2 = b"GET /second HTTP/1.1\r\nHost: a\r\n\r\n";
    let frames = conn(80, &[(true, GET), (false, resp), (true, req2)]);
    let mut got = sids(&[rule, second], &frames);
    got.sort();
    assert_eq!(got, vec![3, 4]);
    // Chunk data bytes only: the sizes are not in the buffer.
    let framing = r#"alert http any any -> any any (msg:"t"; flow:to_client; file_data; content:"5|0d 0a|"; sid:5;)"#;
    assert!(sids(&[framing], &frames).is_empty());
}

#[test]
fn pipelined_requests_each_parsed() {
    let rule = r#"alert http any any -> any any (msg:"t"; http.uri; content:"/third"; http.method; content:"PUT"; sid:9;)"#;
    let mut seg = GET.to_vec();
    seg.extend_from_slice(
        b"POST /second HTTP/1.1\r\nContent-Length: 29\r\n\r\nPUT /third HTTP/1.1\r\nX: y\r\n\r\n",
    );
    // The third "request" is the body of the second: no alert.
    assert!(sids(&[rule], &conn(80, &[(true, &seg)])).is_empty());
    seg.extend_from_slice(b"PUT /third HTTP/1.1\r\n\r\n");
    assert_eq!(sids(&[rule], &conn(80, &[(true, &seg)])), vec![9]);
}

#[test]
fn a_head_split_across_two_segments() {
    // Framing survives the split: the request after it is seen.
    let rule = r#"alert http any any -> any any (msg:"t"; http.uri; content:"/after"; sid:11;)"#;
    let split =
        r#"alert http any any -> any any (msg:"t"; http.user_agent; content:"Evil"; sid:12;)"#;
    let (a, b) = GET.split_at(50);
    let next = b"GET /after HTTP/1.1\r\n\r\n";
    let frames = conn(80, &[(true, a), (true, b), (true, next)]);
    // The split head's bytes wait in the store until it completes: its
    // buffers are inspected on the packet completing it; the next
    // request's on its own.
    assert_eq!(sids(&[rule, split], &frames), vec![12, 11]);
    // Whole, the same head fires.
    assert_eq!(sids(&[split], &conn(80, &[(true, GET)])), vec![12]);
}

#[test]
fn two_instances_sharing_a_store_continue_one_flow() {
    let rule = r#"alert http any any -> any any (msg:"t"; flow:to_server; http.uri; content:"/evil"; sid:13;)"#;
    // The body holds a request-looking text that is not a request.
    let head = b"POST /up HTTP/1.1\r\nContent-Length: 40\r\n\r\n0123456789";
    let rest = b"GET /evil HTTP/1.1\r\n\r\n01234567";
    assert_eq!(head.len() + rest.len() - 41, 40);
    let after = b"GET /evil HTTP/1.1\r\n\r\n";
    let frames = conn(80, &[(true, head), (true, rest), (true, after)]);
    let mut st = LocalStore::new();
    let (a, _) = common::run_in(&mut ips(&[rule]), &mut st, &frames[..4], 1_000_000_000);
    assert!(a.is_empty());
    // Another instance, nothing shared but the store: it knows 30 body
    // bytes are left, so the text in them is no request...
    let mut other = ips(&[rule]);
    let (a, _) = common::run_in(&mut other, &mut st, &frames[4..5], 2_000_000_000);
    assert!(a.is_empty(), "{a:?}");
    // ...and the next request is.
    let (a, _) = common::run_in(&mut other, &mut st, &frames[5..], 3_000_000_000);
    assert_eq!(a, vec![(13, AlertAction::Allowed)]);
}

#[test]
fn drop_rules_drop_the_request() {
    let rule = r#"drop http any any -> any any (msg:"t"; http.uri; content:"/evil"; sid:14;)"#;
    let frames = conn(8000, &[(true, b"GET /evil HTTP/1.0\r\n\r\n")]);
    let (a, d) = common::run_in(&mut ips(&[rule]), &mut LocalStore::new(), &frames, 1);
    assert_eq!(a, vec![(14, AlertAction::Blocked)]);
    assert_eq!(d, vec![false, false, false, true]);
}

/// Real ET Open rules (text copied from the 2024 set), fired by crafted
/// requests and not by near misses.
#[test]
fn et_open_http_rules_fire_on_crafted_requests() {
    let vars = [
        ("HOME_NET", "10.0.0.0/8"),
        ("EXTERNAL_NET", "any"),
        ("HTTP_PORTS", "80"),
        ("HTTP_SERVERS", "any"),
    ];
    let rules = [
        r#"alert http $HOME_NET any -> $EXTERNAL_NET any (msg:"ET USER_AGENTS Suspicious User-Agent (HttpBrowser/1.0)"; flow:established,to_server; http.user_agent; content:"HttpBrowser/1.0"; depth:15; endswith; reference:url,www.fireeye.com; classtype:trojan-activity; sid:2019393; rev:4; metadata:created_at 2014_10_10;)"#,
        r#"alert http $HOME_NET any -> $EXTERNAL_NET any (msg:"ET POLICY curl User-Agent Outbound"; flow:established,to_server; http.user_agent; content:"curl/"; nocase; startswith; classtype:attempted-recon; sid:2013028; rev:7;)"#,
        r#"alert http $HOME_NET any -> $EXTERNAL_NET any (msg:"ET WEB_CLIENT Possible path traversal"; flow:established,to_server; http.method; content:"GET"; http.uri; content:"/etc/passwd"; fast_pattern; classtype:web-application-attack; sid:9000001; rev:1;)"#,
        r#"alert http $EXTERNAL_NET any -> $HOME_NET any (msg:"ET INFO Executable Served"; flow:established,to_client; http.stat_code; content:"200"; file_data; content:"MZ"; within:2; content:"PE|00 00|"; distance:0; classtype:misc-activity; sid:9000002; rev:1;)"#,
    ];
    let run = |req: &[u8], resp: Option<&[u8]>| {
        let mut segs = vec![(true, req)];
        if let Some(r) = resp {
            segs.push((false, r));
        }
        let mut i = common::ips_with(&rules, &vars);
        let (a, _) = common::run_in(&mut i, &mut LocalStore::new(), &conn(80, &segs), 1);
        a.into_iter().map(|x| x.0).collect::<Vec<_>>()
    };
    assert_eq!(
        run(
            b"GET / HTTP/1.1\r\nUser-Agent: HttpBrowser/1.0\r\n\r\n",
            None
        ),
        vec![2019393]
    );
    // Near miss: more after the agent (endswith).
    assert!(run(
        b"GET / HTTP/1.1\r\nUser-Agent: HttpBrowser/1.01\r\n\r\n",
        None
    )
    .is_empty());
    assert_eq!(
        run(b"GET / HTTP/1.1\r\nUser-Agent: CURL/8.0\r\n\r\n", None),
        vec![2013028]
    );
    assert!(run(b"GET / HTTP/1.1\r\nUser-Agent: my curl/8.0\r\n\r\n", None).is_empty());
    // Encoded and dotted, the normalised URI still holds it.
    assert_eq!(
        run(b"GET /a/../%65tc/passwd HTTP/1.1\r\n\r\n", None),
        vec![9000001]
    );
    assert!(run(b"POST /etc/passwd HTTP/1.1\r\n\r\n", None).is_empty());
    let exe = b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\nMZ\x90\x00PE\x00\x00abcd";
    assert_eq!(run(b"GET /x HTTP/1.1\r\n\r\n", Some(exe)), vec![9000002]);
    let not_exe = b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\nxMZ\x00PE\x00\x00abcd";
    assert!(run(b"GET /x HTTP/1.1\r\n\r\n", Some(not_exe)).is_empty());
}

/// `app-layer-event:http.invalid_transfer_encoding_value_in_request`, as
/// ET Open's request-smuggling rules use it (sid 2048367's text as in the
/// 2024 set): it fires on a request whose Transfer-Encoding has no
/// `chunked` token, or `chunked` before HTTP/1.1, and not on a valid one or
/// a response; the keyword is no sticky buffer (a content after it stays on
/// the payload); other events are skipped by name.
#[test]
fn app_layer_event_invalid_transfer_encoding() {
    let qlik = r#"alert http $HOME_NET any -> $EXTERNAL_NET any (msg:"ET WEB_SPECIFIC_APPS Possible DoubleQlik RCE via HTTP Request Tunneling with Malformed Transfer-Encoding (CVE-2023-41265)"; flow:established,to_server; app-layer-event:http.invalid_transfer_encoding_value_in_request; http.cookie; content:"X-Qlik-Session="; fast_pattern; reference:url,praetorian.com/blog/doubleqlik-bypassing-the-original-fix-for-cve-2023-41265/; reference:cve,2023-41265; classtype:web-application-attack; sid:2048367; rev:1;)"#;
    let payload = r#"alert http any any -> any any (msg:"p"; flow:established,to_server; app-layer-event:http.invalid_transfer_encoding_value_in_request; content:"SMUGGLED-BODY"; sid:7;)"#;
    let vars = [("HOME_NET", "10.0.0.0/8"), ("EXTERNAL_NET", "any")];
    let run = |req: &[u8]| {
        let mut i = common::ips_with(&[qlik, payload], &vars);
        let (a, _) = common::run_in(&mut i, &mut LocalStore::new(), &conn(80, &[(true, req)]), 1);
        a.into_iter().map(|x| x.0).collect::<Vec<_>>()
    };
    let req = |te: &str| {
        format!("POST /resources/qmc/fonts/x HTTP/1.1\r\nHost: qlik\r\nCookie: X-Qlik-Session=1234\r\nTransfer-Encoding: {te}\r\nContent-Length: 13\r\n\r\nSMUGGLED-BODY").into_bytes()
    };
    assert_eq!(run(&req("chunked-false")), vec![2048367, 7]);
    assert_eq!(run(&req("xchunked")), vec![2048367, 7]);
    assert!(run(&req("chunked")).is_empty());
    assert!(run(&req("gzip, chunked")).is_empty());
    let old = b"POST / HTTP/1.0\r\nCookie: X-Qlik-Session=1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
    assert_eq!(run(old), vec![2048367]);
    let no_te =
        b"POST / HTTP/1.1\r\nCookie: X-Qlik-Session=1\r\nContent-Length: 13\r\n\r\nSMUGGLED-BODY";
    assert!(run(no_te).is_empty());
    let other =
        r#"alert http any any -> any any (app-layer-event:http.request_field_too_long; sid:9;)"#;
    let e = rules::parse_rule(other, &rules::suricata_default_vars()).unwrap_err();
    assert_eq!(
        e.reason(),
        "keyword app-layer-event http.request_field_too_long"
    );
}

/// Suricata's own rules on a response's Content-Encoding events
/// (http-events.rules, `to_server`) fire on the client's next packet,
/// once, whichever instance takes it; the same events `to_client` fire on
/// the response; a request's lists raise nothing; a rule with other
/// conditions than flow and counters is refused with the reason.
#[test]
fn content_encoding_events_fire_on_the_clients_next_packet() {
    const TML: &str = r#"alert http any any -> any any (msg:"SURICATA HTTP Request too many encoding layers"; flow:established,to_server; app-layer-event:http.too_many_encoding_layers; flowint:http.anomaly.count,+,1; classtype:protocol-command-decode; sid:2221032; rev:1;)"#;
    const ABN: &str = r#"alert http any any -> any any (msg:"SURICATA HTTP Request abnormal Content-Encoding header"; flow:established,to_server; app-layer-event:http.abnormal_ce_header; flowint:http.anomaly.count,+,1; classtype:protocol-command-decode; sid:2221033; rev:1;)"#;
    const TML_TC: &str = r#"alert http any any -> any any (flow:established,to_client; app-layer-event:http.too_many_encoding_layers; sid:11;)"#;
    const BOTH: &str = r#"alert http any any -> any any (flow:to_server; app-layer-event:http.too_many_encoding_layers; app-layer-event:http.abnormal_ce_header; sid:12;)"#;
    let rules = [TML, ABN, TML_TC, BOTH];
    let resp = |ce: &str| {
        format!("HTTP/1.1 200 OK\r\nContent-Encoding: {ce}\r\nContent-Length: 2\r\n\r\nok")
            .into_bytes()
    };
    let get = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
    // The response, then the client's acknowledgement (an empty ACK).
    let frames = |ce: &str| {
        let r = resp(ce);
        let mut f = conn(80, &[(true, get), (false, &r)]);
        let (cs, ss) = (1001 + get.len() as u32, 9001 + r.len() as u32);
        f.push(tcp_v4(C, S, 40000, 80, cs, ss, ACK, &[]));
        f
    };
    let run_at = |fr: &[Vec<u8>]| fired_at(&rules, fr);
    let f = frames("gzip, gzip, gzip");
    let (resp_at, ack_at) = (f.len() - 2, f.len() - 1);
    assert_eq!(run_at(&f), vec![(11, resp_at), (2221032, ack_at)]);
    assert_eq!(run_at(&frames("br")), vec![(2221033, ack_at)]);
    assert_eq!(
        run_at(&frames("br, identity, gzip")),
        vec![
            (11, resp_at),
            (12, ack_at),
            (2221032, ack_at),
            (2221033, ack_at)
        ]
    );
    for fine in ["gzip", "GZIP", "gzip, gzip", "x-gzip, x-deflate", ",gzip"] {
        assert!(run_at(&frames(fine)).is_empty(), "{fine}");
    }
    // Without a packet from the client after it, nothing is owed-fired;
    // in one batch the acknowledgement fires it too.
    let f = frames("br");
    assert!(sids(&rules, &f[..f.len() - 1]).is_empty());
    assert_eq!(sids(&rules, &f), vec![2221033]);
    // A request's lists raise nothing; a drop rule drops the client's packet.
    let post =
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Encoding: a, b, c\r\nContent-Length: 2\r\n\r\nhi";
    let mut f = conn(80, &[(true, post), (false, &resp("gzip"))]);
    f.push(tcp_v4(
        C,
        S,
        40000,
        80,
        1001 + post.len() as u32,
        9001 + resp("gzip").len() as u32,
        ACK,
        &[],
    ));
    assert!(sids(&rules, &f).is_empty());
    let drop = ABN.replacen("alert", "drop", 1);
    let f = frames("br");
    let (sids_d, dropped, _) = common::run_each(ips(&[&drop]), &f);
    assert_eq!(sids_d, vec![2221033]);
    assert_eq!(dropped.iter().position(|&d| d), Some(ack_at));
    // A to_server rule on them with other conditions is refused.
    let other = r#"alert http any any -> any any (flow:to_server; app-layer-event:http.abnormal_ce_header; http.uri; content:"x"; sid:9;)"#;
    let e = rules::parse_rule(other, &rules::suricata_default_vars()).unwrap_err();
    assert!(e.reason().contains("abnormal_ce_header"), "{}", e.reason());
}

/// (alert's sid, index of the packet it fired on) when `frames` run
/// with each packet on a fresh instance over one store; the same alerts
/// as in one batch (asserted).
fn fired_at(rules: &[&str], frames: &[Vec<u8>]) -> Vec<(u32, usize)> {
    let (sids, _, _) = common::run_each(ips(rules), frames);
    let mut at = Vec::new();
    let mut st = LocalStore::new();
    for (k, f) in frames.iter().enumerate() {
        let (a, _) = common::run_in(
            &mut ips(rules),
            &mut st,
            std::slice::from_ref(f),
            1_000_000_000 + k as u64,
        );
        at.extend(a.into_iter().map(|a| (a.0, k)));
    }
    let mut each = sids.clone();
    each.sort_unstable();
    let mut across: Vec<u32> = at.iter().map(|x| x.0).collect();
    across.sort_unstable();
    assert_eq!(each, across);
    at.sort_unstable();
    at
}

/// `http.range_invalid` (measured against Suricata 7.0.10, crate module
/// `http::range`): decided by a response's `Content-Range` and raised by
/// its body's first bytes, so a head alone fires nothing and the packet
/// bringing the body fires the rules without a direction and the
/// `to_client` ones; a `to_server` rule fires on the client's next packet.
/// The same with each packet on a fresh instance over one store (the head's
/// verdict kept in the flow's record), and a body-less response raises
/// nothing, even when the next response of the connection has a body.
#[test]
fn range_invalid_fires_on_the_bodys_first_bytes() {
    const SURI: &str = r#"alert http any any -> any any (msg:"SURICATA HTTP invalid Range header value"; flow:established; app-layer-event:http.range_invalid; flowint:http.anomaly.count,+,1; classtype:protocol-command-decode; sid:2221051; rev:1;)"#;
    const TC: &str = r#"alert http any any -> any any (flow:established,to_client; app-layer-event:http.range_invalid; sid:3;)"#;
    const TS: &str = r#"alert http any any -> any any (flow:established,to_server; app-layer-event:http.range_invalid; sid:2;)"#;
    let rules = [SURI, TC, TS];
    let get = b"GET /f HTTP/1.1\r\nHost: a\r\n\r\n".to_vec();
    let head = |cr: &str, len: usize| {
        format!(
            "HTTP/1.1 206 Partial Content\r\nContent-Range: {cr}\r\nContent-Length: {len}\r\n\r\n"
        )
        .into_bytes()
    };
    // (to_server, bytes) segments, each acknowledged, then the client's
    // empty ACK: (alert's sid, index of the packet it fired on), alike in
    // one batch and with a fresh instance per packet.
    let run_at = |msgs: &[(bool, Vec<u8>)]| {
        let mut f = conn_of(msgs);
        let cs: usize = msgs.iter().filter(|m| m.0).map(|m| m.1.len()).sum();
        let ss: usize = msgs.iter().filter(|m| !m.0).map(|m| m.1.len()).sum();
        f.push(tcp_v4(
            C,
            S,
            40000,
            80,
            1001 + cs as u32,
            9001 + ss as u32,
            ACK,
            &[],
        ));
        let at = fired_at(&rules, &f);
        (f, at)
    };
    // The head alone, then the body: fired on the body's first segment.
    let (f, at) = run_at(&[
        (true, get.clone()),
        (false, head("bytes abc", 4)),
        (false, b"ab".to_vec()),
        (false, b"cd".to_vec()),
    ]);
    // The handshake, the request, the head, then the body's first bytes.
    let body_at = 5;
    assert_eq!(at, vec![(2, f.len() - 1), (3, body_at), (2221051, body_at)]);
    // Head and body in one segment, for values measured either way.
    for (cr, bad) in [
        ("bytes 5-1/10", true),
        ("bytes 0-10/10", true),
        ("bytes=0-1/10", true),
        ("bytes 0-9/10", false),
        ("bytes 1-0/10", false),
        ("bytes 0-20/*", false),
        ("xyz 0-1/10", false),
    ] {
        let mut r = head(cr, 2);
        r.extend_from_slice(b"ok");
        let (_, at) = run_at(&[(true, get.clone()), (false, r)]);
        let sids: Vec<u32> = at.iter().map(|a| a.0).collect();
        assert_eq!(sids.len(), if bad { 3 } else { 0 }, "{cr}: {at:?}");
    }
    // A body-less response raises nothing, its bad range forgotten by the
    // next response (good, with a body) on the connection.
    let mut good = head("bytes 0-1/10", 2);
    good.extend_from_slice(b"ok");
    let (_, at) = run_at(&[
        (true, get.clone()),
        (false, head("bytes abc", 0)),
        (true, get.clone()),
        (false, good),
    ]);
    assert!(at.is_empty(), "{at:?}");
    // A drop rule drops the body's packet.
    let drop = SURI.replacen("alert", "drop", 1);
    let mut r = head("bytes abc", 2);
    r.extend_from_slice(b"ok");
    let f = conn(80, &[(true, &get), (false, &r)]);
    let (sids_d, dropped, _) = common::run_each(ips(&[&drop]), &f);
    assert_eq!(sids_d, vec![2221051]);
    assert_eq!(dropped.iter().position(|&d| d), Some(f.len() - 1));
    // With other conditions the rule is refused, naming its reason.
    let other = r#"alert http any any -> any any (app-layer-event:http.range_invalid; http.uri; content:"x"; sid:9;)"#;
    assert!(rules::parse_rule(other, &rules::suricata_default_vars()).is_err());
}

/// `http.100_continue_already_seen` (measured against Suricata 7.0.10): a
/// second `100 Continue` answering one request fires the rule on its
/// packet, once per transaction however many follow; the final response
/// starts the next transaction afresh; a `102` is no `100`. The same with
/// each packet on a fresh instance over one store.
#[test]
fn a_second_100_continue_fires_once_per_transaction() {
    const SURI: &str = r#"alert http any any -> any any (msg:"SURICATA HTTP status 100-Continue already seen"; flow:established,to_client; app-layer-event:http.100_continue_already_seen; flowint:http.anomaly.count,+,1; classtype:protocol-command-decode; sid:2221009; rev:1;)"#;
    let get = b"GET /f HTTP/1.1\r\nHost: a\r\n\r\n".to_vec();
    let cont = b"HTTP/1.1 100 Continue\r\n\r\n".to_vec();
    let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec();
    let at = |msgs: &[&Vec<u8>]| {
        let m: Vec<(bool, Vec<u8>)> = msgs
            .iter()
            .map(|m| (m.starts_with(b"GET"), m.to_vec()))
            .collect();
        fired_at(&[SURI], &conn_of(&m))
    };
    // The handshake, the request, then the responses from index 4.
    assert_eq!(at(&[&get, &cont, &cont, &ok]), vec![(2221009, 5)]);
    assert_eq!(at(&[&get, &cont, &cont, &cont, &ok]), vec![(2221009, 5)]);
    assert!(at(&[&get, &cont, &ok, &get, &cont, &ok]).is_empty());
    assert_eq!(
        at(&[&get, &ok, &get, &cont, &cont, &ok]),
        vec![(2221009, 7)]
    );
    let mut one = cont.repeat(2);
    one.extend_from_slice(&ok);
    assert_eq!(at(&[&get, &one]), vec![(2221009, 4)]);
    let lower = b"HTTP/1.0 100 continue\r\nContent-Length: 0\r\n\r\n".to_vec();
    assert_eq!(at(&[&get, &lower, &cont, &ok]), vec![(2221009, 5)]);
    let processing = b"HTTP/1.1 102 Processing\r\n\r\n".to_vec();
    assert!(at(&[&get, &processing, &processing, &ok]).is_empty());
    let long = b"HTTP/1.1 1000 Continue\r\n\r\n".to_vec();
    assert!(at(&[&get, &cont, &long, &ok]).is_empty());
    // A drop rule drops the second `100`'s packet.
    let drop = SURI.replacen("alert", "drop", 1);
    let f = conn(
        80,
        &[(true, &get), (false, &cont), (false, &cont), (false, &ok)],
    );
    let (sids, dropped, _) = common::run_each(ips(&[&drop]), &f);
    assert_eq!(sids, vec![2221009]);
    assert_eq!(dropped.iter().position(|&d| d), Some(5));
    // A to_server rule on it is refused with the reason.
    let ts = SURI.replace("to_client", "to_server");
    let e = rules::parse_rule(&ts, &rules::suricata_default_vars()).unwrap_err();
    assert!(
        e.reason().contains("100_continue_already_seen"),
        "{}",
        e.reason()
    );
}

/// `http.unable_to_match_response_to_request` (measured against Suricata
/// 7.0.10): each response past the requests fires the rule on the packet
/// bringing its first bytes; a `100 Continue` is its request's, a `102`
/// answers one; a request counts from its first byte. The same with each
/// packet on a fresh instance over one store. Past two requests awaiting
/// answers the check stops for the connection (documented).
#[test]
fn responses_past_the_requests_fire_unable_to_match() {
    const SURI: &str = r#"alert http any any -> any any (msg:"SURICATA HTTP unable to match response to request"; flow:established,to_client; app-layer-event:http.unable_to_match_response_to_request; flowint:http.anomaly.count,+,1; classtype:protocol-command-decode; sid:2221010; rev:1;)"#;
    let get = b"GET /f HTTP/1.1\r\nHost: a\r\n\r\n".to_vec();
    let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec();
    let at = |msgs: &[(bool, &Vec<u8>)]| {
        let m: Vec<(bool, Vec<u8>)> = msgs.iter().map(|(t, m)| (*t, m.to_vec())).collect();
        fired_at(&[SURI], &conn_of(&m))
    };
    // The handshake, then the messages from index 3.
    assert_eq!(
        at(&[(true, &get), (false, &ok), (false, &ok)]),
        vec![(2221010, 5)]
    );
    assert_eq!(
        at(&[(true, &get), (false, &ok.repeat(2))]),
        vec![(2221010, 4)]
    );
    assert_eq!(
        at(&[(true, &get), (false, &ok), (false, &ok), (false, &ok)]),
        vec![(2221010, 5), (2221010, 6)]
    );
    let p102 = b"HTTP/1.1 102 Processing\r\n\r\n".to_vec();
    assert_eq!(
        at(&[(true, &get), (false, &p102), (false, &p102), (false, &ok)]),
        vec![(2221010, 5), (2221010, 6)]
    );
    let cont = b"HTTP/1.1 100 Continue\r\n\r\n".to_vec();
    assert!(at(&[(true, &get), (false, &cont), (false, &ok)]).is_empty());
    assert!(at(&[(true, &get.repeat(2)), (false, &ok), (false, &ok)]).is_empty());
    assert!(at(&[(true, &get), (false, &ok), (true, &get), (false, &ok)]).is_empty());
    // A server refusing a head not ended yet answers its request.
    let part = b"GET /f HTTP/1.1\r\nHost: a\r\nX-Long: aaaa".to_vec();
    let refuse = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n".to_vec();
    assert!(at(&[(true, &part), (false, &refuse)]).is_empty());
    // Three requests awaiting answers: the count stops, and the check.
    assert!(at(&[(true, &get.repeat(3)), (false, &ok.repeat(4))]).is_empty());
    assert_eq!(
        at(&[(true, &get.repeat(2)), (false, &ok.repeat(3))]),
        vec![(2221010, 4)]
    );
    // Once the requests' direction is no longer framed (a head past
    // MAX_HEAD), responses are no longer checked.
    let mut long = b"GET /f HTTP/1.1\r\nX-Long: ".to_vec();
    long.resize(40_000, b'a');
    let f = conn_of(&[
        (true, get.clone()),
        (false, ok.clone()),
        (true, long),
        (false, ok.clone()),
        (false, ok.clone()),
    ]);
    assert!(fired_at(&[SURI], &f).is_empty());
    // A to_server rule on it is refused with the reason.
    let ts = SURI.replace("to_client", "to_server");
    let e = rules::parse_rule(&ts, &rules::suricata_default_vars()).unwrap_err();
    assert!(e.reason().contains("unable_to_match"), "{}", e.reason());
}

/// Runs the framing over `data` cut into pieces at `cuts`, returning the
/// final phase and every piece's head and body bytes.
fn frame(data: &[u8], cuts: &[usize], to_server: bool) -> (Phase, usize) {
    let mut me = HttpDir::default();
    let mut peer = HttpDir::default();
    if !to_server {
        peer.advance(
            b"GET / HTTP/1.1\r\n",
            true,
            &mut HttpDir::default(),
            &mut Piece::default(),
            |_, _| {},
        );
    }
    let mut piece = Piece::default();
    let mut bufs = Buffers::default();
    let mut seen = 0;
    let mut at = 0;
    let mut pts: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
    pts.sort();
    pts.push(data.len());
    for p in pts {
        let chunk = &data[at..p.max(at)];
        me.advance(chunk, to_server, &mut peer, &mut piece, |pc, _| {
            bufs.build(
                pc.head.clone().map(|r| &chunk[r]),
                chunk,
                &pc.body,
                to_server,
            );
            seen += bufs.bytes.len();
        });
        at = p.max(at);
    }
    (me.phase, seen)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..2000), cuts in proptest::collection::vec(any::<usize>(), 0..4), to_server: bool) {
        frame(&b, &cuts, to_server);
    }

    #[test]
    fn mutated_requests_never_panic(
        pos in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
        cuts in proptest::collection::vec(any::<usize>(), 0..4),
    ) {
        let mut b = b"POST /a%2e%2e/b/./c?x=%zz HTTP/1.1\r\nHost: [::1]:80\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n3\r\nabc\r\n0\r\nT: x\r\n\r\nGET / HTTP/1.0\r\n\r\n".to_vec();
        for (p, v) in pos {
            let i = p % b.len();
            b[i] = v;
        }
        frame(&b, &cuts, true);
        frame(&b, &cuts, false);
    }
}

#[test]
fn bounds_end_parsing_without_panic() {
    // A head past the limit: the direction is given up.
    let mut big = b"GET / HTTP/1.1\r\n".to_vec();
    while big.len() < 40_000 {
        big.extend_from_slice(b"X-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    assert_eq!(frame(&big, &[], true).0, Phase::Off);
    // A bad chunk size likewise.
    let bad = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
    assert_eq!(frame(bad, &[], false).0, Phase::Off);
    // Not HTTP.
    assert_eq!(frame(b"\x16\x03\x01\x00", &[], true).0, Phase::Off);
    // Split anywhere, the framing ends where it does whole.
    let two = b"GET / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET /x HTTP/1.1\r\n";
    for cut in 0..two.len() {
        assert_eq!(frame(two, &[cut], true).0, Phase::Head, "cut at {cut}");
    }
}

/// The ET Open rule set, if present: almost every `http` rule loads, and
/// those that do not are skipped for a named keyword, never the protocol.
#[test]
fn et_open_http_rules_load() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../../shared/data/et-open");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!("ET Open rules absent at {}: not checked", dir.display());
        return;
    };
    let vars = rules::suricata_default_vars();
    let (mut loaded, mut total) = (0, 0);
    let mut reasons = std::collections::BTreeMap::<String, usize>::new();
    let mut all = Vec::new();
    for e in entries {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "rules") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        for line in text.lines().filter(|l| l.starts_with("alert http ")) {
            total += 1;
            match rules::parse_rule(line, &vars) {
                Ok(r) => {
                    loaded += 1;
                    all.push(r);
                }
                Err(e) => *reasons.entry(e.reason()).or_default() += 1,
            }
        }
    }
    eprintln!("ET Open http rules: {loaded} of {total} load; skipped {reasons:?}");
    assert!(total > 14000, "{total}");
    assert!(
        loaded * 100 >= total * 90,
        "{loaded} of {total}: {reasons:?}"
    );
    assert!(!reasons.contains_key("protocol http"));
    // And they compile into one IPS.
    all.sort_by_key(|r| r.sid);
    all.dedup_by_key(|r| r.sid);
    let n = all.len();
    let i = Ips::new(all, Vec::new(), sluice_state::Namespace(2), 300).unwrap();
    assert_eq!(i.rule_count(), n);
    // Every rule has a content for the prefilter.
    assert!(i.http_unfiltered() < 50, "{}", i.http_unfiltered());
}

/// The record carries the framing (version 3); version 2 records, without
/// it, still decode.
#[test]
fn the_framing_round_trips_through_the_record() {
    use sluice_ips::engine::{record_size, FlowState};
    use sluice_state::{Codec, Reader, Writer};
    let mut st = FlowState::default();
    let mut peer = HttpDir::default();
    st.http[0].advance(
        b"POST / HTTP/1.1\r\nContent-Length: 9\r\n\r\nabc",
        true,
        &mut peer,
        &mut Piece::default(),
        |_, _| {},
    );
    assert_eq!(st.http[0].phase, Phase::Body);
    assert_eq!(st.http[0].remaining, 6);
    let mut buf = Vec::new();
    st.encode(&mut Writer::new(&mut buf));
    assert_eq!(buf.len(), record_size(0) + 15);
    assert_eq!(FlowState::decode(&mut Reader::new(&buf)).unwrap(), st);
    let mut idle = Vec::new();
    FlowState::default().encode(&mut Writer::new(&mut idle));
    assert_eq!(idle.len(), record_size(0));
    // Version 6: the same without the flowint count.
    let mut v6 = idle[..idle.len() - 1].to_vec();
    v6[0] = 6;
    assert_eq!(
        FlowState::decode(&mut Reader::new(&v6)).unwrap(),
        FlowState::default()
    );
    // Version 5: without the detected protocol's byte either.
    let mut v5 = idle[..idle.len() - 2].to_vec();
    v5[0] = 5;
    assert_eq!(
        FlowState::decode(&mut Reader::new(&v5)).unwrap(),
        FlowState::default()
    );
    // Version 3: without the two pending bytes either.
    let mut v3 = idle[..idle.len() - 4].to_vec();
    v3[0] = 3;
    assert_eq!(
        FlowState::decode(&mut Reader::new(&v3)).unwrap(),
        FlowState::default()
    );
    // Version 2: without the two framing bytes either.
    let mut v2 = idle[..idle.len() - 6].to_vec();
    v2[0] = 2;
    assert_eq!(
        FlowState::decode(&mut Reader::new(&v2)).unwrap(),
        FlowState::default()
    );
    // An unknown phase, pending kind or stream protocol, or too many
    // flowints, is refused, not trusted.
    for at in [5, 3, 2, 1] {
        let mut bad = idle.clone();
        let n = bad.len();
        // 0xee: no phase, kind or protocol, and a detection byte with a
        // bit no state uses.
        bad[n - at] = 0xee;
        assert!(FlowState::decode(&mut Reader::new(&bad)).is_err(), "{at}");
    }
    // A pending unit's description round-trips (version 4).
    let mut st = FlowState::default();
    st.pend[1] = sluice_ips::pending::Pend {
        kind: sluice_ips::pending::TLS,
        len: 1200,
        end: 1_000_000,
    };
    let mut buf = Vec::new();
    st.encode(&mut Writer::new(&mut buf));
    assert_eq!(buf.len(), record_size(0) + 8);
    assert_eq!(FlowState::decode(&mut Reader::new(&buf)).unwrap(), st);
    // A length over the kind's bound is refused.
    st.pend[1].len = sluice_ips::pending::MAX_TLS_UNIT as u32 + 1;
    let mut buf = Vec::new();
    st.encode(&mut Writer::new(&mut buf));
    assert!(FlowState::decode(&mut Reader::new(&buf)).is_err());
    // A pending HTTP body (version 5) round-trips at the same size; a
    // version 4 record cannot name one.
    st.pend[1] = sluice_ips::pending::Pend {
        kind: sluice_ips::pending::HTTP_BODY,
        len: 70_000,
        end: 5,
    };
    let mut buf = Vec::new();
    st.encode(&mut Writer::new(&mut buf));
    assert_eq!(buf.len(), record_size(0) + 8);
    assert_eq!(FlowState::decode(&mut Reader::new(&buf)).unwrap(), st);
    buf[0] = 4;
    assert!(FlowState::decode(&mut Reader::new(&buf)).is_err());
    buf[0] = 5;
    let over = sluice_ips::http::body::MAX_BLOB as u32 + 1;
    st.pend[1].len = over;
    let mut buf = Vec::new();
    st.encode(&mut Writer::new(&mut buf));
    assert!(FlowState::decode(&mut Reader::new(&buf)).is_err());
}

/// Rules on the request's head buffers (ET Open's included) and one on its
/// body, none of which may depend on where the segments were cut (the body
/// is accumulated: `tests/http_body.rs`).
const SPLIT_RULES: &[&str] = &[
    r#"alert http any any -> any any (msg:"b"; http.method; content:"POST"; http.request_body; content:"payload"; bsize:7; sid:27;)"#,
    r#"alert http any any -> any any (msg:"m"; http.method; content:"POST"; sid:21;)"#,
    r#"alert http any any -> any any (msg:"u"; http.uri; content:"/evil.php?id=AB"; sid:22;)"#,
    r#"alert http any any -> any any (msg:"h"; http.host; content:"www.example.com"; bsize:15; sid:23;)"#,
    r#"alert http any any -> any any (msg:"a"; http.user_agent; content:"HttpBrowser/1.0"; depth:15; endswith; sid:24;)"#,
    r#"alert http any any -> any any (msg:"c"; http.cookie; content:"session=abc"; sid:25;)"#,
    r#"alert http any any -> any any (msg:"hd"; http.header; content:"X-Long|3a 20|"; content:"zz|0d 0a|"; distance:0; sid:26;)"#,
    r#"alert http any any -> any any (msg:"n"; http.uri; content:"/next"; sid:28;)"#,
    r#"alert http any any -> any any (msg:"ET USER_AGENTS Suspicious User-Agent (HttpBrowser/1.0)"; flow:established,to_server; http.user_agent; content:"HttpBrowser/1.0"; depth:15; endswith; reference:url,www.fireeye.com; classtype:trojan-activity; sid:2019393; rev:4;)"#,
];

fn split_request() -> Vec<u8> {
    let mut r = b"POST /evil.php?id=%41%42 HTTP/1.1\r\nHost: WWW.Example.COM\r\nUser-Agent: HttpBrowser/1.0\r\nCookie: session=abc\r\nX-Long: ".to_vec();
    r.extend(std::iter::repeat_n(b'y', 300));
    r.extend_from_slice(b"zz\r\nContent-Length: 7\r\n\r\npayload");
    // The body's end is framed: the next request is one.
    r.extend_from_slice(b"GET /next HTTP/1.1\r\n\r\n");
    r
}

/// The key of the client direction's pending blob of the flow of `frame`.
fn pend_key(frame: &[u8]) -> sluice_state::Key {
    let flow = sluice_wire::parse::parse_frame(frame).unwrap().flow;
    sluice_ips::pending::key(sluice_state::Namespace(2), &flow.canonical().0, 0)
}

fn sorted(mut v: Vec<u32>) -> Vec<u32> {
    v.sort_unstable();
    v
}

/// Cuts `data` at `cuts` (sorted, deduplicated, inside the data).
fn pieces(data: &[u8], cuts: &[usize]) -> Vec<(bool, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = 0;
    for &c in cuts.iter().chain(std::iter::once(&data.len())) {
        if c > at {
            out.push((true, data[at..c].to_vec()));
            at = c;
        }
    }
    out
}

fn conn_of(p: &[(bool, Vec<u8>)]) -> Vec<Vec<u8>> {
    let segs: Vec<(bool, &[u8])> = p.iter().map(|(t, b)| (*t, &b[..])).collect();
    conn(80, &segs)
}

#[test]
fn a_request_split_at_every_byte_fires_the_same_rules() {
    let req = split_request();
    let whole = sorted(sids(SPLIT_RULES, &conn(80, &[(true, &req)])));
    assert_eq!(whole, vec![21, 22, 23, 24, 25, 26, 27, 28, 2019393]);
    for cut in 1..req.len() {
        let frames = conn_of(&pieces(&req, &[cut]));
        // One batch (the unit stays in memory) and one batch per packet
        // (it goes through the store).
        assert_eq!(sorted(sids(SPLIT_RULES, &frames)), whole, "cut at {cut}");
        let (b, _, c) = batched(SPLIT_RULES, &frames);
        assert_eq!(sorted(b), whole, "cut at {cut}, batched");
        assert_eq!(c.pending_discarded + c.pending_lost, 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn a_request_cut_anywhere_fires_the_same_rules(cuts in proptest::collection::vec(1usize..500, 1..8)) {
        let req = split_request();
        let whole = sorted(sids(SPLIT_RULES, &conn(80, &[(true, &req)])));
        let mut cuts: Vec<usize> = cuts.into_iter().filter(|&c| c < req.len()).collect();
        cuts.sort_unstable();
        cuts.dedup();
        let (b, _, _) = batched(SPLIT_RULES, &conn_of(&pieces(&req, &cuts)));
        prop_assert_eq!(sorted(b), whole);
    }
}

#[test]
fn a_split_head_continues_on_another_instance() {
    let req = split_request();
    let frames = conn_of(&pieces(&req, &[60]));
    let mut st = LocalStore::new();
    let (a, _) = common::run_in(&mut ips(SPLIT_RULES), &mut st, &frames[..4], 1_000_000_000);
    assert!(a.is_empty(), "{a:?}");
    // The first half is in the store, nowhere else.
    let key = pend_key(&frames[0]);
    let mut ops = sluice_state::Ops::new();
    let id = ops.get(key);
    sluice_state::StateStore::execute(&mut st, &mut ops).unwrap();
    assert_eq!(ops.value(id), Some(&req[..60]));
    let mut other = ips(SPLIT_RULES);
    let (a, _) = common::run_in(&mut other, &mut st, &frames[4..], 2_000_000_000);
    let got = sorted(a.into_iter().map(|a| a.0).collect());
    assert_eq!(got, vec![21, 22, 23, 24, 25, 26, 27, 28, 2019393]);
    assert_eq!(other.stats().pending_joined, 1);
    // Consumed: the blob is gone.
    let mut ops = sluice_state::Ops::new();
    let id = ops.get(key);
    sluice_state::StateStore::execute(&mut st, &mut ops).unwrap();
    assert_eq!(ops.value(id), None);
}

#[test]
fn a_head_over_the_bound_is_counted_and_not_stored() {
    let rule =
        r#"alert http any any -> any any (msg:"t"; http.user_agent; content:"Evil"; sid:31;)"#;
    let mut big = b"GET / HTTP/1.1\r\nUser-Agent: Evil\r\n".to_vec();
    while big.len() < 40_000 {
        big.extend_from_slice(b"X-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    big.extend_from_slice(b"\r\n");
    let cuts: Vec<usize> = (1..big.len() / 1000 + 1).map(|k| k * 1000).collect();
    let frames = conn_of(&pieces(&big, &cuts));
    let mut i = ips(&[rule]);
    let mut st = LocalStore::new();
    let mut most = 0;
    for (k, f) in frames.iter().enumerate() {
        let (a, _) = common::run_in(
            &mut i,
            &mut st,
            std::slice::from_ref(f),
            1 + k as u64 * 1_000_000,
        );
        assert!(a.is_empty());
        most = most.max(st.approx_memory());
    }
    assert_eq!(i.stats().pending_overflow, 1);
    // Once over the bound, nothing is pending: the store holds the
    // records only (the blob held at most the 32 KiB bound).
    let key = pend_key(&frames[0]);
    let mut ops = sluice_state::Ops::new();
    let id = ops.get(key);
    sluice_state::StateStore::execute(&mut st, &mut ops).unwrap();
    assert_eq!(ops.value(id), None);
    assert!(most < 200 * 1024, "{most}");
}

#[test]
fn a_drop_rule_on_a_split_head_drops_the_packet_completing_it() {
    let rule = r#"drop http any any -> any any (msg:"t"; http.user_agent; content:"HttpBrowser"; sid:32;)"#;
    let req = split_request();
    let frames = conn_of(&pieces(&req, &[40, 80]));
    let mut more = frames.clone();
    more.push(tcp_v4(
        C,
        S,
        40000,
        80,
        1001 + req.len() as u32,
        9001,
        ACK | PSH,
        b"more",
    ));
    let (a, d, _) = batched(&[rule], &more);
    assert_eq!(a, vec![32]);
    // The User-Agent line ends in the third segment: it is dropped, and so
    // is every later packet of the flow.
    assert_eq!(d, vec![false, false, false, false, false, true, true]);
}

#[test]
fn a_gap_discards_the_pending_head() {
    let rule = r#"alert http any any -> any any (msg:"t"; http.user_agent; content:"HttpBrowser"; sid:33;)"#;
    let req = split_request();
    let frames = conn_of(&pieces(&req, &[40]));
    // The second half never arrives; the server acknowledges past it
    // (bytes went by another path), then more client bytes come.
    let end = 1001 + req.len() as u32;
    let mut f = frames[..4].to_vec();
    f.push(tcp_v4(
        C,
        S,
        40000,
        80,
        end,
        9001,
        ACK | PSH,
        b"GET /x HTTP/1.1\r\n\r\n",
    ));
    f.push(tcp_v4(S, C, 80, 40000, 9001, end + 19, ACK, &[]));
    f.push(tcp_v4(C, S, 40000, 80, end + 19, 9001, ACK | PSH, b"Z"));
    let (a, _, c) = batched(&[rule], &f);
    assert!(a.is_empty(), "{a:?}");
    assert_eq!(c.pending_discarded, 1, "{c:?}");
}

#[test]
fn a_pending_head_expires_with_its_flow() {
    use sluice_nf::{Ctx, NetworkFunction, Streams};
    use sluice_state::StateStore;
    let req = split_request();
    let frames = conn_of(&pieces(&req, &[60]));
    let mut i = ips(SPLIT_RULES);
    let mut st = LocalStore::new();
    common::run_in(&mut i, &mut st, &frames[..4], 1_000_000_000);
    let key = pend_key(&frames[0]);
    let flow = sluice_wire::parse::parse_frame(&frames[0]).unwrap().flow;
    let rec = sluice_state::Key::flow(
        sluice_state::Namespace(2),
        sluice_ips::TABLE_FLOW,
        &flow.canonical().0,
        &[],
    );
    let present = |st: &mut LocalStore, k| {
        let mut ops = sluice_state::Ops::new();
        let id = ops.get(k);
        st.execute(&mut ops).unwrap();
        ops.value(id).is_some()
    };
    assert!(present(&mut st, key) && present(&mut st, rec));
    let (mut events, mut emit) = (Vec::new(), Vec::new());
    let streams = Streams::default();
    let mut ctx = Ctx {
        now_ns: 1_000_000_000 + 301 * 1_000_000_000,
        stage: 2,
        streams: &streams,
        events: &mut events,
        emit: &mut emit,
    };
    i.on_timers(&mut ctx, &mut st).unwrap();
    assert!(!present(&mut st, key));
    assert!(!present(&mut st, rec));
}

/// [`common::run_each`] with an IPS of `rules`.
fn batched(rules: &[&str], frames: &[Vec<u8>]) -> (Vec<u32>, Vec<bool>, sluice_ips::Counters) {
    common::run_each(ips(rules), frames)
}

#[test]
fn each_matching_request_of_a_connection_alerts() {
    // Suricata raises an alert per matching transaction, not once per flow:
    // three requests on one keep-alive connection, two of them to /admin,
    // each in its own segment.
    let rule = r#"alert http any any -> any any (msg:"admin"; flow:established,to_server; http.uri; content:"/admin"; sid:5;)"#;
    let req = |uri: &str| format!("GET {uri} HTTP/1.1\r\nHost: a\r\n\r\n").into_bytes();
    let (a, b, c) = (req("/admin/x"), req("/index"), req("/admin/y"));
    let frames = conn(
        80,
        &[
            (true, &a),
            (false, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
            (true, &b),
            (true, &c),
        ],
    );
    assert_eq!(sids(&[rule], &frames), vec![5, 5]);
    // Packet by packet through the store, the same count.
    let (got, _, _) = common::run_each(ips(&[rule]), &frames);
    assert_eq!(got, vec![5, 5]);
    // Pipelined in one segment: still one alert per matching request.
    let mut seg = a.clone();
    seg.extend_from_slice(&b);
    seg.extend_from_slice(&c);
    assert_eq!(sids(&[rule], &conn(80, &[(true, &seg)])), vec![5, 5]);
}

#[test]
fn alerts_name_the_flows_application_protocol() {
    // Suricata's `app_proto`: the parser's protocol for its rules, and the
    // flow's detected protocol for plain content rules (none before one is
    // detected, or on a flow that is not HTTP).
    let rules = [
        r#"alert http any any -> any any (msg:"uri"; http.uri; content:"/admin"; sid:1;)"#,
        r#"alert tcp any any -> any any (msg:"raw"; content:"secret"; sid:2;)"#,
    ];
    let app = |frames: &[Vec<u8>]| -> Vec<(u32, Option<&'static str>)> {
        let (alerts, _) = common::alerts_in(
            &mut ips(&rules),
            &mut LocalStore::new(),
            frames,
            1_000_000_000,
        );
        alerts.into_iter().map(|a| (a.sid, a.app_proto)).collect()
    };
    let req = b"GET /admin?q=secret HTTP/1.1\r\nHost: a\r\n\r\n";
    let mut got = app(&conn(80, &[(true, req)]));
    got.sort();
    assert_eq!(got, vec![(1, Some("http")), (2, Some("http"))]);
    assert_eq!(
        app(&conn(5000, &[(true, b"a secret, not HTTP\r\n")])),
        vec![(2, None)]
    );
}

#[test]
fn transforms_change_the_buffer_the_keywords_inspect() {
    let req: &[u8] = b"GET /a%2Fb+c?q=WiNdOw.NaViGaTe%28 HTTP/1.1\r\nHost: Evil.Example\r\nUser-Agent: Mozilla  /\t 5.0\r\n\r\n";
    // Each with its near miss: the untransformed buffer does not match.
    for (opts, yes) in [
        (
            r#"http.host.raw; to_lowercase; content:"evil.example"; endswith;"#,
            true,
        ),
        (r#"http.host.raw; content:"evil.example"; endswith;"#, false),
        (
            r#"http.host.raw; to_uppercase; content:"EVIL.EXAMPLE"; bsize:12;"#,
            true,
        ),
        (
            r#"http.uri.raw; url_decode; content:"/a/b c?q="; startswith;"#,
            true,
        ),
        (r#"http.uri.raw; content:"/a/b c";"#, false),
        (
            r#"http.user_agent; strip_whitespace; content:"Mozilla/5.0"; bsize:11;"#,
            true,
        ),
        (
            r#"http.user_agent; compress_whitespace; content:"Mozilla /"; content:"5.0"; distance:1;"#,
            true,
        ),
        (
            r#"http.user_agent; compress_whitespace; content:"Mozilla /5.0";"#,
            false,
        ),
        // Chained in the rule's order.
        (
            r#"http.uri.raw; url_decode; to_lowercase; content:"window.navigate(";"#,
            true,
        ),
        (
            r#"http.uri.raw; to_lowercase; content:"window.navigate(";"#,
            false,
        ),
        (
            r#"http.host.raw; dotprefix; to_lowercase; content:".evil.example"; startswith;"#,
            true,
        ),
        // "Evil.Example"'s MD5 and SHA-256, raw.
        (
            r#"http.host.raw; to_md5; content:"|07 8c 71 82 24 97 78 09 04 9d c5 e5 66 29 ed db|"; bsize:16;"#,
            true,
        ),
        (r#"http.host; to_sha256; bsize:32;"#, true),
        (r#"http.host; to_sha1; bsize:32;"#, false),
        (
            r#"http.host.raw; xor:"20"; content:"eVIL"; startswith;"#,
            true,
        ),
        (
            r#"http.uri; pcrexform:"q=([a-z]+)"; content:"WiNdOw"; bsize:6;"#,
            false,
        ),
        (
            r#"http.uri; pcrexform:"q=([A-Za-z]+)"; content:"WiNdOw"; bsize:6;"#,
            true,
        ),
        (
            r#"http.header; header_lowercase; content:"host: Evil.Example";"#,
            true,
        ),
        (r#"http.header; content:"host: Evil.Example";"#, false),
    ] {
        assert_eq!(fires(opts, req), yes, "{opts}");
    }
}

#[test]
fn a_buffer_named_again_with_other_transforms_is_another_buffer() {
    let req: &[u8] = b"GET /Index.PHP HTTP/1.1\r\nHost: a\r\n\r\n";
    for (opts, yes) in [
        // The plain buffer after the transformed one: its bytes as sent.
        (
            r#"http.uri; to_lowercase; content:"/index.php"; http.uri; content:"/Index.PHP";"#,
            true,
        ),
        (
            r#"http.uri; to_lowercase; content:"/index.php"; http.uri; content:"/index.php";"#,
            false,
        ),
        // The same transforms again: the same buffer.
        (
            r#"http.uri; to_lowercase; content:"/index"; http.uri; to_lowercase; content:".php"; distance:0;"#,
            true,
        ),
        // A transform after a content applies to the keywords after it.
        (
            r#"http.uri; content:"/Index"; to_uppercase; content:"/INDEX.PHP"; bsize:10;"#,
            true,
        ),
        (
            r#"http.uri; content:"/index"; to_uppercase; content:"/INDEX.PHP";"#,
            false,
        ),
    ] {
        assert_eq!(fires(opts, req), yes, "{opts}");
    }
}

#[test]
fn transforms_are_refused_where_suricata_refuses_them() {
    for (opts, reason) in [
        // A content the transform's output cannot hold.
        (
            r#"http.host; to_lowercase; content:"Evil";"#,
            "error: transform",
        ),
        (
            r#"http.host; strip_whitespace; content:"a b";"#,
            "error: transform",
        ),
        (
            r#"http.host; compress_whitespace; content:"a  b";"#,
            "error: transform",
        ),
        (
            r#"http.host; to_uppercase; content:"evil";"#,
            "error: transform",
        ),
        // Not after a sticky buffer.
        (r#"to_lowercase; content:"a";"#, "error: transform"),
        (r#"xor:"zz"; content:"a";"#, "error: bad value"),
        (
            r#"http.uri; pcrexform:"nocapture"; content:"a";"#,
            "error: bad value",
        ),
        (
            r#"http.uri; content:"a"; to_lowercase;"#,
            "error: transform",
        ),
    ] {
        let r = format!("alert http any any -> any any ({opts} sid:1;)");
        let e = parse_rule(&r, &Default::default()).unwrap_err();
        assert_eq!(e.reason(), reason, "{opts}: {e}");
    }
    // A negated content is not checked (Suricata's validation skips it).
    assert!(parse_rule(
        r#"alert http any any -> any any (http.host; to_lowercase; content:!"Evil"; sid:1;)"#,
        &Default::default()
    )
    .is_ok());
}

#[test]
fn chunk_length_event_rules_load_alone_and_refuse_other_conditions() {
    use sluice_ips::rules::parse_rule;
    let vars = Default::default();
    let r = parse_rule(
        "alert http any any -> any any (msg:\"x\"; flow:established,to_server; app-layer-event:http.invalid_request_chunk_len; flowint:http.anomaly.count,+,1; sid:1;)",
        &vars,
    )
    .unwrap();
    assert_eq!(r.http_body_events, 1);
    let e = parse_rule(
        "alert http any any -> any any (msg:\"x\"; app-layer-event:http.invalid_response_chunk_len; http.uri; content:\"/a\"; sid:1;)",
        &vars,
    )
    .unwrap_err();
    assert!(e.is_unsupported(), "{e}");
    assert!(e.to_string().contains("http body event"), "{e}");
    // Suricata's decompression event: no direction, bit 4.
    let r = parse_rule(
        "alert http any any -> any any (msg:\"SURICATA HTTP gzip decompression failed\"; flow:established; app-layer-event:http.gzip_decompression_failed; flowint:http.anomaly.count,+,1; classtype:protocol-command-decode; sid:2221001; rev:1;)",
        &vars,
    )
    .unwrap();
    assert_eq!(r.http_body_events, 4);
    let e = parse_rule(
        "alert http any any -> any any (app-layer-event:http.gzip_decompression_failed; file_data; content:\"x\"; sid:1;)",
        &vars,
    )
    .unwrap_err();
    assert!(e.to_string().contains("http body event"), "{e}");
}
