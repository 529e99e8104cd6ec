//! EVE alerts carry the application-layer object Suricata writes next to an
//! alert raised by a protocol's rules: `http` (hostname, url, user agent,
//! method, protocol; status and content type for a response), `tls` (sni,
//! ja3) and `dns` (the query's rrname and rrtype); a stream rule's alert on
//! the same flow carries `app_proto` only.

use sluice_state::LocalStore;
use sluice_wire::build::{tcp_v4, udp_v4};
use sluice_wire::tcp::flags::{ACK, PSH, SYN};

mod common;

const C: [u8; 4] = [10, 0, 0, 1];
const S: [u8; 4] = [192, 168, 1, 2];

/// A connection to `port`: handshake, `request` from the client, and
/// `response` back.
fn flow(port: u16, request: &[u8], response: &[u8]) -> Vec<Vec<u8>> {
    let c = 1001 + request.len() as u32;
    vec![
        tcp_v4(C, S, 40000, port, 1000, 0, SYN, &[]),
        tcp_v4(S, C, port, 40000, 9000, 1001, SYN | ACK, &[]),
        tcp_v4(C, S, 40000, port, 1001, 9001, ACK, &[]),
        tcp_v4(C, S, 40000, port, 1001, 9001, ACK | PSH, request),
        tcp_v4(S, C, port, 40000, 9001, c, ACK | PSH, response),
    ]
}

/// The EVE records of the alerts `rules` raise on `frames`.
fn eve(rules: &[&str], frames: &[Vec<u8>]) -> Vec<serde_json::Value> {
    let mut ips = common::ips_with(
        rules,
        &[("HOME_NET", "10.0.0.0/8"), ("EXTERNAL_NET", "any")],
    );
    let (alerts, _) = common::alerts_in(&mut ips, &mut LocalStore::new(), frames, 1_000_000_000);
    alerts
        .into_iter()
        .map(|a| sluice_nf::Event::Alert(a).to_eve())
        .collect()
}

#[test]
fn an_http_alert_carries_the_messages_fields() {
    let req = b"GET /a/b?c=1 HTTP/1.1\r\nHost: Www.Example.com:8080\r\nUser-Agent: curl/8.0\r\nReferer: http://r.example/\r\n\r\n";
    let resp = b"HTTP/1.1 302 Found\r\nContent-Type: text/html; charset=UTF-8\r\nLocation: /login\r\nContent-Length: 0\r\n\r\n";
    let v = eve(
        &[
            r#"alert http any any -> any any (msg:"uri"; http.uri; content:"/a/b"; sid:1;)"#,
            r#"alert http any any -> any any (msg:"302"; http.stat_code; content:"302"; sid:2;)"#,
            r#"alert tcp any any -> any any (msg:"raw"; content:"curl/8.0"; sid:3;)"#,
        ],
        &flow(80, req, resp),
    );
    let by_sid = |sid: u64| {
        v.iter()
            .find(|e| e["alert"]["signature_id"] == sid)
            .unwrap_or_else(|| panic!("sid {sid} in {v:?}"))
    };
    let h = &by_sid(1)["http"];
    assert_eq!(h["hostname"], "www.example.com", "{h}");
    assert_eq!(h["url"], "/a/b?c=1");
    assert_eq!(h["http_user_agent"], "curl/8.0");
    assert_eq!(h["http_refer"], "http://r.example/");
    assert_eq!(h["http_method"], "GET");
    assert_eq!(h["protocol"], "HTTP/1.1");
    assert_eq!(by_sid(1)["app_proto"], "http");
    let r = &by_sid(2)["http"];
    assert_eq!(r["status"], 302, "{r}");
    assert_eq!(r["http_content_type"], "text/html");
    assert_eq!(r["redirect"], "/login");
    assert_eq!(r["length"], 0);
    // A stream rule: the flow's protocol, no transaction object.
    assert_eq!(by_sid(3)["app_proto"], "http");
    assert!(by_sid(3).get("http").is_none(), "{}", by_sid(3));
}

/// A body rule firing on a later packet of a response (the head came
/// earlier, its buffers built only once a rule needs them) carries the
/// response's fields too, in one batch and one batch per packet.
#[test]
fn a_body_alert_on_a_later_packet_carries_the_head_fields() {
    let req = b"GET /dl HTTP/1.1\r\nHost: files.example\r\n\r\n";
    let head = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-evil\r\nContent-Length: 40\r\n\r\n";
    let body = b"0123456789SIGNATURE-IN-BODY0123456789abc";
    let c = 1001 + req.len() as u32;
    let frames = vec![
        tcp_v4(C, S, 40000, 80, 1000, 0, SYN, &[]),
        tcp_v4(S, C, 80, 40000, 9000, 1001, SYN | ACK, &[]),
        tcp_v4(C, S, 40000, 80, 1001, 9001, ACK, &[]),
        tcp_v4(C, S, 40000, 80, 1001, 9001, ACK | PSH, req),
        tcp_v4(S, C, 80, 40000, 9001, c, ACK | PSH, head),
        tcp_v4(
            S,
            C,
            80,
            40000,
            9001 + head.len() as u32,
            c,
            ACK | PSH,
            &body[..5],
        ),
        tcp_v4(
            S,
            C,
            80,
            40000,
            9006 + head.len() as u32,
            c,
            ACK | PSH,
            &body[5..],
        ),
    ];
    let rules = [
        r#"alert http any any -> any any (msg:"body"; flow:to_client; file_data; content:"SIGNATURE-IN-BODY"; sid:7;)"#,
    ];
    let mut ips = common::ips_with(
        &rules,
        &[("HOME_NET", "10.0.0.0/8"), ("EXTERNAL_NET", "any")],
    );
    let (one, _) = common::alerts_in(&mut ips, &mut LocalStore::new(), &frames, 1_000_000_000);
    let mut each = Vec::new();
    let (mut ips, mut st) = (
        common::ips_with(
            &rules,
            &[("HOME_NET", "10.0.0.0/8"), ("EXTERNAL_NET", "any")],
        ),
        LocalStore::new(),
    );
    for (k, f) in frames.iter().enumerate() {
        let (a, _) = common::alerts_in(
            &mut ips,
            &mut st,
            std::slice::from_ref(f),
            1_000_000_000 + k as u64,
        );
        each.extend(a);
    }
    for alerts in [one, each] {
        assert_eq!(alerts.len(), 1, "{alerts:?}");
        let v = sluice_nf::Event::Alert(alerts[0].clone()).to_eve();
        let h = &v["http"];
        assert_eq!(h["status"], 200, "{v}");
        assert_eq!(h["http_content_type"], "application/x-evil", "{v}");
        assert_eq!(h["length"], 40, "{v}");
    }
}

fn tls_client_hello(name: &str) -> Vec<u8> {
    let len2 = |b: &[u8]| {
        let mut v = (b.len() as u16).to_be_bytes().to_vec();
        v.extend_from_slice(b);
        v
    };
    let mut entry = vec![0];
    entry.extend(len2(name.as_bytes()));
    let mut sni = vec![0, 0];
    sni.extend(len2(&len2(&entry)));
    let mut b = vec![3, 3];
    b.extend([7u8; 32]);
    b.push(0);
    b.extend(len2(&[0x13, 0x01, 0xc0, 0x2b]));
    b.extend([1, 0]);
    b.extend(len2(&sni));
    let mut hs = vec![1];
    hs.extend(&(b.len() as u32).to_be_bytes()[1..]);
    hs.extend(b);
    let mut r = vec![22, 3, 1];
    r.extend(len2(&hs));
    r
}

/// The alert's `tls` object carries the SNI; its JA3 fingerprint only
/// when a loaded rule uses JA3 (Suricata's `ja3-fingerprints: auto`
/// computes them only then).
#[test]
fn a_tls_alert_carries_the_sni_and_ja3_when_a_rule_uses_it() {
    let sni =
        r#"alert tls any any -> any any (msg:"sni"; tls.sni; content:"evil.example"; sid:1;)"#;
    let ja3_rule = r#"alert tls any any -> any any (msg:"ja3"; ja3.hash; content:"0000"; sid:2;)"#;
    let hello = flow(443, &tls_client_hello("evil.example"), &[]);
    let v = eve(&[sni], &hello);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0]["app_proto"], "tls");
    assert_eq!(v[0]["tls"]["sni"], "evil.example", "{}", v[0]);
    assert!(v[0]["tls"].get("ja3").is_none(), "{}", v[0]);
    let v = eve(&[sni, ja3_rule], &hello);
    assert_eq!(v.len(), 1, "{v:?}");
    let ja3 = &v[0]["tls"]["ja3"];
    assert_eq!(ja3["hash"].as_str().map(str::len), Some(32), "{ja3}");
    assert!(
        ja3["string"]
            .as_str()
            .is_some_and(|s| s.starts_with("771,4865-49195,0,")),
        "{ja3}"
    );
}

#[test]
fn a_dns_alert_carries_the_query() {
    // id 0x1234, RD, one question: evil.example AAAA IN.
    let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in ["evil", "example"] {
        q.push(label.len() as u8);
        q.extend(label.as_bytes());
    }
    q.extend([0, 0, 28, 0, 1]);
    let v = eve(
        &[r#"alert dns any any -> any any (msg:"q"; dns.query; content:"evil.example"; sid:1;)"#],
        &[udp_v4(C, S, 40000, 53, &q)],
    );
    assert_eq!(v.len(), 1, "{v:?}");
    let dns = &v[0]["dns"];
    assert_eq!(dns["version"], 3, "{}", v[0]);
    assert_eq!(dns["type"], "request");
    assert_eq!(dns["id"], 0x1234);
    assert_eq!(dns["rd"], true);
    assert_eq!(dns["queries"][0]["rrname"], "evil.example");
    assert_eq!(dns["queries"][0]["rrtype"], "AAAA");
}

/// The records of the three tests above, validated with Python's
/// `jsonschema` against Suricata's EVE schema (`../shared/data/suricata/`,
/// read in place; skipped with a note where it or the validator is absent).
#[test]
fn the_objects_validate_against_suricatas_eve_schema() {
    let schema = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../../shared/data/suricata/eve-schema.json");
    if !schema.exists() {
        eprintln!("EVE schema absent: not validated");
        return;
    }
    let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 4];
    q.extend(b"evil\x07example\x00\x00\x1c\x00\x01");
    let mut records = eve(
        &[
            r#"alert http any any -> any any (msg:"uri"; http.uri; content:"/a"; sid:1;)"#,
            r#"alert http any any -> any any (msg:"200"; http.stat_code; content:"200"; sid:2;)"#,
        ],
        &flow(
            80,
            b"GET /a HTTP/1.1\r\nHost: h\r\nUser-Agent: u\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 0\r\n\r\n",
        ),
    );
    records.extend(eve(
        &[r#"alert tls any any -> any any (msg:"sni"; tls.sni; content:"e"; sid:3;)"#],
        &flow(443, &tls_client_hello("e.example"), &[]),
    ));
    records.extend(eve(
        &[r#"alert dns any any -> any any (msg:"q"; dns.query; content:"evil"; sid:4;)"#],
        &[udp_v4(C, S, 40000, 53, &q)],
    ));
    assert_eq!(records.len(), 4, "{records:?}");
    for k in ["http", "tls", "dns"] {
        assert!(records.iter().any(|r| r.get(k).is_some()), "a {k} object");
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("eve.json");
    let lines: Vec<String> = records.iter().map(|r| r.to_string()).collect();
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    const CHECK: &str = r#"
import json, sys
import jsonschema
schema = json.load(open(sys.argv[1]))
v = jsonschema.validators.validator_for(schema)(schema)
for i, line in enumerate(open(sys.argv[2])):
    for err in v.iter_errors(json.loads(line)):
        print(f"line {i + 1}: {list(err.path)}: {err.message[:200]}")
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", CHECK])
        .arg(&schema)
        .arg(&file)
        .output();
    let Ok(out) = out.map_err(|e| eprintln!("python3: {e}")) else {
        return;
    };
    if !out.status.success() {
        eprintln!("jsonschema not available: not validated");
        return;
    }
    let bad = String::from_utf8_lossy(&out.stdout);
    assert!(
        bad.is_empty(),
        "refused by Suricata's schema:\n{bad}\n{lines:?}"
    );
}
