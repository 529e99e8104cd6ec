//! `app-layer-protocol` ([`sluice_ips::alproto`]) through the engine: the
//! verdict of each flow direction, the once-per-direction flag of rules
//! whose only condition is the keyword, the verdicts kept in the store
//! record across batches, and the rules refused or skipped at load.

use sluice_state::LocalStore;
use sluice_wire::build::{tcp_v4, udp_v4};
use sluice_wire::tcp::flags::{ACK, PSH, SYN};

mod common;

const C: [u8; 4] = [10, 0, 0, 1];
const S: [u8; 4] = [192, 168, 1, 2];

/// A TCP connection to `port`: the handshake, then each `(to_server,
/// bytes)` as one segment followed by the other side's acknowledgement,
/// as an endpoint's stack sends them.
fn conv(port: u16, msgs: &[(bool, &[u8])]) -> Vec<Vec<u8>> {
    let (mut cs, mut ss) = (1001u32, 9001u32);
    let mut f = vec![
        tcp_v4(C, S, 40000, port, 1000, 0, SYN, &[]),
        tcp_v4(S, C, port, 40000, 9000, 1001, SYN | ACK, &[]),
        tcp_v4(C, S, 40000, port, 1001, 9001, ACK, &[]),
    ];
    for &(to_server, m) in msgs {
        if to_server {
            f.push(tcp_v4(C, S, 40000, port, cs, ss, ACK | PSH, m));
            cs += m.len() as u32;
            f.push(tcp_v4(S, C, port, 40000, ss, cs, ACK, &[]));
        } else {
            f.push(tcp_v4(S, C, port, 40000, ss, cs, ACK | PSH, m));
            ss += m.len() as u32;
            f.push(tcp_v4(C, S, 40000, port, cs, ss, ACK, &[]));
        }
    }
    f
}

/// The sids `rules` raise over `frames`, as one batch and as one batch per
/// packet (the verdicts then go through the store between packets): both
/// must agree.
fn sids(rules: &[&str], frames: &[Vec<u8>]) -> Vec<u32> {
    let mut ips = common::ips_with(rules, &[]);
    let (a, _) = common::run_in(&mut ips, &mut LocalStore::new(), frames, 1_000_000_000);
    let one: Vec<u32> = a.into_iter().map(|a| a.0).collect();
    let (each, _, _) = common::run_each(common::ips_with(rules, &[]), frames);
    assert_eq!(one, each, "one batch and a batch per packet differ");
    one
}

const REQ: &[u8] = b"GET /evil.php HTTP/1.1\r\nHost: a.example\r\n\r\n";
const RESP: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi";

fn http_flow(port: u16) -> Vec<Vec<u8>> {
    conv(
        port,
        &[(true, REQ), (false, RESP), (true, REQ), (false, RESP)],
    )
}

#[test]
fn a_keyword_only_rule_fires_once_per_direction() {
    let rules = [
        "alert tcp any any -> any any (msg:\"http\"; app-layer-protocol:http; sid:1;)",
        "alert tcp any any -> any any (msg:\"http server\"; flow:to_client; app-layer-protocol:http1; sid:2;)",
        "alert tcp any any -> any any (msg:\"tls\"; app-layer-protocol:tls; sid:3;)",
        "alert tcp any any -> any any (msg:\"unknown\"; app-layer-protocol:unknown; flow:to_server; sid:4;)",
    ];
    // Packets: 4 request, 5 ack, 6 response, 7 ack, 8 request, 9 ack (the
    // server's first packet after its verdict), ...
    let got = sids(&rules, &http_flow(8081));
    assert_eq!(got.iter().filter(|&&s| s == 1).count(), 2, "{got:?}");
    assert_eq!(got.iter().filter(|&&s| s == 2).count(), 1, "{got:?}");
    assert!(!got.contains(&3), "{got:?}");
    // Every verdict so far was a protocol: `unknown` had no flag to fire on.
    assert!(!got.contains(&4), "{got:?}");
}

#[test]
fn other_rules_see_the_verdicts_on_every_packet() {
    let rules = [
        "alert tcp any any -> any any (msg:\"content\"; flow:established,to_server; content:\"/evil.php\"; app-layer-protocol:http; sid:1;)",
        "alert tcp any any -> any any (msg:\"server packets\"; flow:established,to_client; app-layer-protocol:http; sid:2;)",
        "alert tcp any any -> any any (msg:\"not http\"; flow:established; app-layer-protocol:!http; sid:3;)",
        "alert tcp any any -> any any (msg:\"either\"; flow:established,to_client; app-layer-protocol:http,to_server; sid:4;)",
    ];
    let got = sids(&rules, &http_flow(8081));
    // Both requests' contents (the first sees the verdict its own bytes made).
    assert_eq!(got.iter().filter(|&&s| s == 1).count(), 2, "{got:?}");
    // The server's packets after its response: the ack of the second
    // request, the second response.
    assert_eq!(got.iter().filter(|&&s| s == 2).count(), 2, "{got:?}");
    assert!(!got.contains(&3), "{got:?}");
    // The client's verdict, read on server packets from its ack on: 5, 6,
    // 9, 10.
    assert_eq!(got.iter().filter(|&&s| s == 4).count(), 4, "{got:?}");
}

#[test]
fn non_http_on_port_80_fails_and_an_undecided_flow_matches_nothing() {
    let rules = [
        "alert tcp any any -> any 80 (msg:\"non-HTTP over 80\"; flow:to_server; app-layer-protocol:!http; sid:1;)",
        "alert tcp any any -> any any (msg:\"failed\"; app-layer-protocol:failed; sid:2;)",
        "alert tcp any any -> any any (msg:\"marker\"; flow:established,to_server; content:\"MARK\"; app-layer-protocol:!http; sid:3;)",
        "alert tcp any any -> any any (msg:\"unknown\"; flow:established,to_server; content:\"MARK\"; app-layer-protocol:unknown; sid:4;)",
    ];
    let junk = vec![0x7fu8; 600];
    let failed = conv(
        80,
        &[
            (true, &junk),
            (false, &junk),
            (true, b"MARK"),
            (false, b"xx"),
        ],
    );
    let got = sids(&rules, &failed);
    assert_eq!(got.iter().filter(|&&s| s == 1).count(), 1, "{got:?}");
    assert_eq!(got.iter().filter(|&&s| s == 2).count(), 2, "{got:?}");
    assert_eq!(got.iter().filter(|&&s| s == 3).count(), 1, "{got:?}");
    assert!(!got.contains(&4), "{got:?}");
    // 16 bytes to the server, none back: not done, still unknown. (A
    // first line without its end could still be a request: that would be
    // HTTP, as for the HTTP rules.)
    let undecided = conv(80, &[(true, b"MARK 012345678\r\n")]);
    assert_eq!(sids(&rules, &undecided), vec![4]);
}

#[test]
fn smtp_fails_the_banner_side() {
    let rules = [
        "alert tcp any any -> any any (msg:\"smtp client\"; flow:to_server; app-layer-protocol:smtp; sid:1;)",
        "alert tcp any any -> any any (msg:\"server failed\"; flow:to_client; app-layer-protocol:failed; sid:2;)",
        "alert tcp any any -> any any (msg:\"server smtp\"; flow:to_client; app-layer-protocol:smtp; sid:3;)",
        "alert tcp any any -> any any (msg:\"final\"; flow:established,to_client; content:\"250 OK\"; app-layer-protocol:smtp,final; sid:4;)",
    ];
    let f = conv(
        2525,
        &[
            (false, b"220 mx.example ESMTP\r\n"),
            (true, b"EHLO client.example\r\n"),
            (false, b"250 mx.example\r\n"),
            (true, b"MAIL FROM:<a@b.example>\r\n"),
            (false, b"250 OK\r\n"),
        ],
    );
    let mut got = sids(&rules, &f);
    got.sort_unstable();
    assert_eq!(got, vec![1, 2, 4]);
}

#[test]
fn ssh_and_tls_each_direction() {
    let rules = [
        "alert tcp any any -> any any (msg:\"ssh\"; app-layer-protocol:ssh; sid:1;)",
        "alert tcp any any -> any any (msg:\"not ssh\"; flow:established; app-layer-protocol:!ssh; sid:2;)",
    ];
    let f = conv(
        2222,
        &[
            (false, b"SSH-2.0-OpenSSH_9.6\r\n"),
            (true, b"SSH-2.0-libssh_0.9.6\r\n"),
            (true, b"x"),
            (false, b"y"),
        ],
    );
    assert_eq!(sids(&rules, &f), vec![1, 1]);
}

#[test]
fn datagrams_are_dns_or_failed() {
    let rules = [
        "alert udp any any -> any any (msg:\"dns\"; app-layer-protocol:dns; sid:1;)",
        "alert udp any any -> any any (msg:\"failed\"; app-layer-protocol:failed; sid:2;)",
        "alert udp any any -> any any (msg:\"not dns\"; app-layer-protocol:!dns; sid:3;)",
    ];
    // A query for a.example: header, one question.
    let mut q = vec![0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    q.extend_from_slice(b"\x01a\x07example\x00\x00\x01\x00\x01");
    let frames = vec![
        udp_v4(C, S, 40001, 53, &q),
        udp_v4(C, S, 40002, 5555, b"no dns here at all"),
    ];
    assert_eq!(sids(&rules, &frames), vec![1, 2, 3]);
}

#[test]
fn the_rules_refused_and_skipped() {
    use sluice_ips::rules::{parse_rule, RuleSyntax};
    let vars = Default::default();
    let rule = |o: &str| parse_rule(&format!("alert tcp any any -> any any ({o} sid:1;)"), &vars);
    let r = rule("app-layer-protocol:!http;").unwrap();
    assert!(r.alp.pd_only);
    let r = rule("flow:to_server; app-layer-protocol:\"smtp\"; flowbits:set,x;").unwrap();
    assert!(
        r.alp.pd_only,
        "a direction and a flowbits operation keep it"
    );
    for o in [
        "flow:established; app-layer-protocol:tls;",
        "content:\"x\"; app-layer-protocol:tls;",
        "dsize:>0; app-layer-protocol:tls;",
        "app-layer-protocol:tls; flowbits:isset,x;",
    ] {
        assert!(!rule(o).unwrap().alp.pd_only, "{o}");
    }
    // Another mode is another condition.
    assert_eq!(
        rule("app-layer-protocol:http,to_server; app-layer-protocol:!tls,to_client;")
            .unwrap()
            .alp
            .conds()
            .len(),
        2
    );
    let e = rule("app-layer-protocol:http2;").unwrap_err();
    assert_eq!(e, RuleSyntax::UnsupportedAppProto("http2".into()));
    assert_eq!(e.reason(), "app-layer-protocol http2");
    for (o, why) in [
        ("app-layer-protocol:!unknown;", "cannot be negated"),
        (
            "app-layer-protocol:http,backwards;",
            "unknown mode \"backwards\"",
        ),
        ("app-layer-protocol:;", "no protocol"),
        ("app-layer-protocol:!;", "no protocol"),
        ("app-layer-protocol:gopher;", "unknown protocol \"gopher\""),
        (
            "app-layer-protocol:http; app-layer-protocol:!smtp;",
            "cannot be combined",
        ),
        (
            "app-layer-protocol:!http; app-layer-protocol:!http;",
            "cannot be combined",
        ),
        (
            "http.uri; content:\"/a\"; app-layer-protocol:http;",
            "already bound to protocol http",
        ),
    ] {
        let e = rule(o).unwrap_err();
        assert!(e.to_string().contains(why), "{o}: {e}");
        assert!(!e.is_unsupported(), "{o}");
    }
    let e = parse_rule(
        "alert http any any -> any any (app-layer-protocol:!smtp; sid:1;)",
        &vars,
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("already bound to protocol http"),
        "{e}"
    );
    // The keyword before a sticky buffer is fine (Suricata's order).
    assert!(rule("app-layer-protocol:http; http.uri; content:\"/a\";").is_ok());
}

/// Version 10 records carry each direction's verdict; a version 9 record
/// decodes without it, and a byte no verdict has is refused.
#[test]
fn the_verdicts_round_trip_through_the_record() {
    use sluice_ips::engine::{record_size, FlowState};
    use sluice_state::{Codec, Reader, Writer};
    let st = FlowState {
        alp: [
            sluice_ips::alproto::HTTP | 0x10,
            sluice_ips::alproto::FAILED,
        ],
        ..FlowState::default()
    };
    let mut buf = Vec::new();
    st.encode(&mut Writer::new(&mut buf));
    assert_eq!(buf.len(), record_size(0));
    assert_eq!(FlowState::decode(&mut Reader::new(&buf)).unwrap(), st);
    let n = buf.len();
    let mut old = buf[..n - 2].to_vec();
    old[0] = 9;
    let back = FlowState::decode(&mut Reader::new(&old)).unwrap();
    assert_eq!(back.alp, [0, 0]);
    buf[n - 1] = 0x39;
    assert!(FlowState::decode(&mut Reader::new(&buf)).is_err());
}

/// Suricata 7.0.10's app-layer-events.rules, the four protocol detection
/// events Sluice decides.
const EVENT_RULES: [&str; 4] = [
    "alert ip any any -> any any (msg:\"SURICATA Applayer Mismatch protocol both directions\"; flow:established; app-layer-event:applayer_mismatch_protocol_both_directions; flowint:applayer.anomaly.count,+,1; classtype:protocol-command-decode; sid:2260000; rev:1;)",
    "alert ip any any -> any any (msg:\"SURICATA Applayer Wrong direction first Data\"; flow:established; app-layer-event:applayer_wrong_direction_first_data; flowint:applayer.anomaly.count,+,1; classtype:protocol-command-decode; sid:2260001; rev:1;)",
    "alert ip any any -> any any (msg:\"SURICATA Applayer Detect protocol only one direction\"; flow:established; app-layer-event:applayer_detect_protocol_only_one_direction; flowint:applayer.anomaly.count,+,1; classtype:protocol-command-decode; sid:2260002; rev:1;)",
    "alert ip any any -> any any (msg:\"SURICATA Applayer Protocol detection skipped\"; flow:established; app-layer-event:applayer_proto_detection_skipped; flowint:applayer.anomaly.count,+,1; classtype:protocol-command-decode; sid:2260003; rev:1;)",
];

/// A minimal TLS 1.2 ClientHello record: one cipher suite, no extension.
fn client_hello() -> Vec<u8> {
    let mut body = vec![0x03, 0x03];
    body.extend_from_slice(&[0x22; 32]);
    body.extend_from_slice(&[0, 0, 2, 0x13, 0x01, 1, 0, 0, 0]);
    let mut hs = vec![1, 0, (body.len() >> 8) as u8, body.len() as u8];
    hs.extend_from_slice(&body);
    let mut rec = vec![22, 3, 1, (hs.len() >> 8) as u8, hs.len() as u8];
    rec.extend_from_slice(&hs);
    rec
}

const SSH_BANNER: &[u8] = b"SSH-2.0-OpenSSH_9.6p1 Debian\r\n";

#[test]
fn detection_events_fire_once_on_the_deciding_packet() {
    // HTTP to an SSH server: a mismatch, once, on the server's banner.
    let f = conv(
        8080,
        &[
            (true, REQ),
            (false, SSH_BANNER),
            (true, REQ),
            (false, &[0u8; 40]),
        ],
    );
    assert_eq!(sids(&EVENT_RULES, &f), vec![2260000]);
    // HTTP answered by bytes of no protocol: one direction only.
    let junk = vec![0xeeu8; 600];
    let f = conv(
        8080,
        &[(true, REQ), (false, &junk), (true, REQ), (false, &junk)],
    );
    assert_eq!(sids(&EVENT_RULES, &f), vec![2260002]);
    // Plain HTTP: nothing.
    assert!(sids(&EVENT_RULES, &http_flow(8080)).is_empty());
}

#[test]
fn a_server_speaking_tls_first_is_the_wrong_direction_and_nothing_follows() {
    let hello = client_hello();
    let junk = vec![0xeeu8; 600];
    // The server's bytes of no protocol first, then the client's hello:
    // TLS wants the client first. Suricata gives the flow's application
    // layer up, so the server's undetected side raises nothing more.
    let f = conv(
        8443,
        &[(false, &junk), (true, &hello), (false, &junk), (true, b"x")],
    );
    assert_eq!(sids(&EVENT_RULES, &f), vec![2260001]);
    // An HTTP response before its request: HTTP asks no first direction.
    let f = conv(8080, &[(false, RESP), (true, REQ), (false, RESP)]);
    assert!(sids(&EVENT_RULES, &f).is_empty());
}

#[test]
fn detection_is_skipped_after_100_000_bytes_one_way() {
    let seg = vec![0xabu8; 1400];
    let mut msgs: Vec<(bool, &[u8])> = vec![(true, &seg); 80];
    // The server's HTTP after the cutoff raises no second event.
    msgs.push((false, RESP));
    let got = sids(&EVENT_RULES, &conv(8080, &msgs));
    assert_eq!(got, vec![2260003]);
    // 70,000 bytes stay under it.
    let msgs: Vec<(bool, &[u8])> = vec![(true, &seg); 50];
    assert!(sids(&EVENT_RULES, &conv(8080, &msgs)).is_empty());
}

#[test]
fn protocol_change_events_are_refused_with_their_reason() {
    for name in [
        "applayer_no_tls_after_starttls",
        "applayer_unexpected_protocol",
    ] {
        let rule = format!(
            "alert tcp any any -> any any (msg:\"x\"; flow:established; app-layer-event:{name}; sid:1;)"
        );
        let e = sluice_ips::rules::parse_rule(&rule, &Default::default()).unwrap_err();
        assert!(e.is_unsupported(), "{e}");
        assert!(e.to_string().contains("protocol changes"), "{e}");
    }
    let e = sluice_ips::rules::parse_rule(
        "alert ip any any -> any any (msg:\"x\"; app-layer-event:applayer_nonsense; sid:1;)",
        &Default::default(),
    )
    .unwrap_err();
    assert!(!e.is_unsupported(), "an unknown event is a rule error: {e}");
}

#[test]
fn an_ip_rule_with_established_reads_each_protocols_flow() {
    let rules = ["alert ip any any -> any any (msg:\"established\"; flow:established; content:\"MARK\"; sid:1;)"];
    // UDP: established from the first reply on.
    let q = udp_v4(C, S, 5000, 7000, b"MARK out");
    let r = udp_v4(S, C, 7000, 5000, b"MARK back");
    assert_eq!(sids(&rules, &[q.clone(), r.clone(), q.clone()]), vec![1, 1]);
    // TCP: from the handshake's end.
    let f = conv(9000, &[(true, b"MARK")]);
    assert_eq!(sids(&rules, &f), vec![1]);
}
