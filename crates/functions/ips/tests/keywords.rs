//! Each rule keyword beyond contents, with the semantics of Suricata's
//! documentation: rule text plus packets built by `sluice_wire::build`, asserting
//! alerts and drops.

use std::path::Path;

use sluice_ips::rules::{self, RuleSyntax, Vars};
use sluice_ips::Ips;
use sluice_nf::{AlertAction, Ctx, NetworkFunction, Streams};
use sluice_state::{LocalStore, Namespace, StateStore};
use sluice_wire::build::{icmp_v4_echo, icmp_v4_error, tcp_v4, udp_v4};
use sluice_wire::tcp::flags::{ACK, FIN, PSH, SYN};

mod common;
use common::run_in;

const C: [u8; 4] = [10, 0, 0, 1];
const S: [u8; 4] = [192, 168, 1, 2];

fn ips(rules: &[&str]) -> Ips {
    common::ips_with(rules, &[("HOME_NET", "10.0.0.0/8")])
}

/// Runs `frames` (one batch, through the reassembler) and returns the alerts as
/// (sid, action) and which packets were dropped.
fn run(ips: &mut Ips, frames: &[Vec<u8>]) -> (Vec<(u32, AlertAction)>, Vec<bool>) {
    run_in(ips, &mut LocalStore::new(), frames, 1_000_000_000)
}

fn sids(rules: &[&str], frames: &[Vec<u8>]) -> Vec<u32> {
    run(&mut ips(rules), frames).0.iter().map(|a| a.0).collect()
}

fn handshake(dport: u16) -> Vec<Vec<u8>> {
    vec![
        tcp_v4(C, S, 40000, dport, 1000, 0, SYN, &[]),
        tcp_v4(S, C, dport, 40000, 9000, 1001, SYN | ACK, &[]),
        tcp_v4(C, S, 40000, dport, 1001, 9001, ACK, &[]),
    ]
}

fn udp(len: usize) -> Vec<u8> {
    udp_v4(C, S, 5000, 53, &vec![b'x'; len])
}

#[test]
fn header_only_rules_alert_on_every_matching_packet() {
    // No content, no condition: every packet from the client's network.
    let r = "alert ip $HOME_NET any -> any any (msg:\"from home\"; sid:1;)";
    let mut frames = handshake(80);
    frames.push(udp(3));
    // The server's SYN-ACK is not from HOME_NET.
    assert_eq!(sids(&[r], &frames), vec![1, 1, 1]);
}

#[test]
fn dsize_forms() {
    let frames: Vec<Vec<u8>> = [0, 3, 5, 6, 10].iter().map(|&n| udp(n)).collect();
    let hits = |opt: &str| {
        let rule = format!("alert udp any any -> any any (dsize:{opt}; sid:1;)");
        let (a, _) = run(&mut ips(&[&rule]), &frames);
        a.len()
    };
    assert_eq!(hits("5"), 1);
    assert_eq!(hits(">5"), 2); // 6, 10
    assert_eq!(hits("<5"), 2); // 0, 3
    assert_eq!(hits("!5"), 4);
    // Ranges exclude both ends: 3 < x < 10.
    assert_eq!(hits("3<>10"), 2); // 5, 6
    assert_eq!(hits(">=6"), 2);
    assert_eq!(hits("<=3"), 2);
}

#[test]
fn dsize_with_content_on_datagrams() {
    let r = "alert udp any any -> any any (dsize:>4; content:\"xx\"; sid:1;)";
    assert_eq!(sids(&[r], &[udp(3), udp(5)]), vec![1]);
}

#[test]
fn tcp_flags_with_modifiers_and_mask() {
    let syn = tcp_v4(C, S, 40000, 22, 1, 0, SYN, &[]);
    // SYN with ECE and CWR (an ECN-setup SYN).
    let syn_ecn = tcp_v4(C, S, 40001, 22, 1, 0, SYN | 0x40 | 0x80, &[]);
    let synack = tcp_v4(S, C, 22, 40000, 9, 2, SYN | ACK, &[]);
    let finack = tcp_v4(C, S, 40002, 22, 1, 1, FIN | ACK, &[]);
    let frames = [syn, syn_ecn, synack, finack];
    let alerts = |opt: &str| -> Vec<bool> {
        let rule = format!("alert tcp any any <> any any (flags:{opt}; sid:1;)");
        let mut i = ips(&[&rule]);
        frames
            .iter()
            .map(|f| !run(&mut i, std::slice::from_ref(f)).0.is_empty())
            .collect()
    };
    // Exactly SYN.
    assert_eq!(alerts("S"), [true, false, false, false]);
    // SYN, ignoring the two ECN bits (ET Open's scan rules).
    assert_eq!(alerts("S,12"), [true, true, false, false]);
    assert_eq!(alerts("S,CE"), [true, true, false, false]);
    // SYN and maybe others.
    assert_eq!(alerts("+S"), [true, true, true, false]);
    // Any of SYN or FIN, but a rule naming SYN without `!` is evaluated on
    // SYN segments only (Suricata's SYN list): not on the FIN.
    assert_eq!(alerts("*SF"), [true, true, true, false]);
    assert_eq!(alerts("*F"), [false, false, false, true]);
    // A modifier among the flags counts (Suricata's parser): `S+` is `+S`.
    assert_eq!(alerts("S+"), alerts("+S"));
    // Not SYN+ACK both.
    assert_eq!(alerts("!SA"), [true, true, false, true]);
    assert_eq!(alerts("FA"), [false, false, false, true]);
    // A UDP packet never matches a flags condition.
    let rule = "alert ip any any -> any any (flags:!S; sid:1;)";
    assert!(run(&mut ips(&[rule]), &[udp(1)]).0.is_empty());
}

#[test]
fn itype_and_icode() {
    let echo = icmp_v4_echo(C, S, true, 1, 1); // type 8 code 0
    let unreach = icmp_v4_error(S, C, 3, 1, &[0x45; 28]); // type 3 code 1
    let frames = [echo, unreach];
    let which = |opts: &str| {
        let rule = format!("alert icmp any any -> any any ({opts} sid:1;)");
        let mut i = ips(&[&rule]);
        frames
            .iter()
            .map(|f| !run(&mut i, std::slice::from_ref(f)).0.is_empty())
            .collect::<Vec<_>>()
    };
    assert_eq!(which("itype:8;"), [true, false]);
    assert_eq!(which("itype:>5;"), [true, false]);
    assert_eq!(which("itype:2<>9;"), [true, true]);
    assert_eq!(which("itype:3; icode:1;"), [false, true]);
    assert_eq!(which("icode:0<>2;"), [false, true]);
    assert_eq!(which("icode:1-3;"), [false, false]);
    assert_eq!(which("icode:!0;"), [false, true]);
    // Not ICMP: no match.
    let rule = "alert ip any any -> any any (itype:0; sid:1;)";
    assert!(run(&mut ips(&[rule]), &[udp(1)]).0.is_empty());
}

#[test]
fn ip_proto_ttl_and_sameip() {
    let tcp = tcp_v4(C, S, 40000, 80, 1, 0, SYN, &[]);
    let u = udp(1);
    let frames = [tcp, u];
    let which = |opts: &str| {
        let rule = format!("alert ip any any -> any any ({opts} sid:1;)");
        let mut i = ips(&[&rule]);
        frames
            .iter()
            .map(|f| !run(&mut i, std::slice::from_ref(f)).0.is_empty())
            .collect::<Vec<_>>()
    };
    assert_eq!(which("ip_proto:17;"), [false, true]);
    assert_eq!(which("ip_proto:TCP;"), [true, false]);
    assert_eq!(which("ip_proto:!6;"), [false, true]);
    assert_eq!(which("ip_proto:<17;"), [true, false]);
    // The builders send TTL 64.
    assert_eq!(which("ttl:64;"), [true, true]);
    assert_eq!(which("ttl:<10;"), [false, false]);
    assert_eq!(which("ttl:60-70;"), [true, true]);
    assert_eq!(which("sameip;"), [false, false]);
    let land = udp_v4(C, C, 7, 7, b"x");
    let rule = "alert udp any any -> any any (sameip; sid:1;)";
    assert_eq!(run(&mut ips(&[rule]), &[land]).0.len(), 1);
}

#[test]
fn flow_options_on_packet_rules() {
    let mut frames = handshake(80);
    frames.push(tcp_v4(C, S, 40000, 80, 1001, 9001, ACK | PSH, b"hi"));
    frames.push(tcp_v4(S, C, 80, 40000, 9001, 1003, ACK, &[]));
    let which = |opts: &str| {
        let rule = format!("alert tcp any any <> any any ({opts} sid:1;)");
        let (a, _) = run(&mut ips(&[&rule]), &frames);
        a.len()
    };
    // From the ACK that completes the handshake on: that ACK, the data packet
    // and the server's ACK.
    assert_eq!(which("flow:established;"), 3);
    assert_eq!(which("flow:established,to_server;"), 2);
    assert_eq!(which("flow:to_client;"), 2);
    // SYN and SYN-ACK.
    assert_eq!(which("flow:not_established;"), 2);
    assert_eq!(which("flow:stateless;"), 5);
    assert_eq!(which("flow:only_stream;"), 5);
    assert_eq!(which("flow:no_stream;"), 5);
    // Untracked TCP (no SYN seen): not part of a stream.
    let lone = tcp_v4(C, S, 41000, 80, 5, 5, ACK, b"x");
    let rule = "alert tcp any any -> any any (flow:only_stream; sid:1;)";
    assert!(run(&mut ips(&[rule]), std::slice::from_ref(&lone))
        .0
        .is_empty());
    let rule = "alert tcp-pkt any any -> any any (flow:stateless; sid:1;)";
    assert_eq!(run(&mut ips(&[rule]), &[lone]).0.len(), 1);
}

#[test]
fn drop_packet_rule_blocks_and_noalert_is_silent() {
    let rule = "drop udp any any -> any any (dsize:>100; sid:1;)";
    let (a, d) = run(&mut ips(&[rule]), &[udp(10), udp(200), udp(10)]);
    assert_eq!(a, vec![(1, AlertAction::Blocked)]);
    // The flow stays blocked after the match.
    assert_eq!(d, vec![false, true, true]);
    let rule = "drop udp any any -> any any (dsize:>100; noalert; sid:1;)";
    let (a, d) = run(&mut ips(&[rule]), &[udp(10), udp(200)]);
    assert!(a.is_empty());
    assert_eq!(d, vec![false, true]);
    let rule = "alert tcp any any -> any any (content:\"hi\"; noalert; sid:2;)";
    let mut frames = handshake(80);
    frames.push(tcp_v4(C, S, 40000, 80, 1001, 9001, ACK | PSH, b"hi"));
    assert!(run(&mut ips(&[rule]), &frames).0.is_empty());
}

#[test]
fn modifiers_and_information_do_not_change_matching() {
    let plain = "alert tcp any any -> any 80 (content:\"evil\"; content:\"x\"; distance:0; sid:1;)";
    let decorated = "alert tcp any any -> any 80 (msg:\"m\"; content:\"evil\"; fast_pattern; rawbytes; content:\"x\"; distance:0; fast_pattern:only; prefilter; reference:url,example.com; metadata:created_at 2024_01_01, deployment Perimeter; classtype:trojan-activity; target:dest_ip; tag:session,5,packets; gid:1; priority:2; sid:1; rev:4;)";
    for payload in [&b"an evil x"[..], b"x evil", b"evilx"] {
        let mut frames = handshake(80);
        frames.push(tcp_v4(C, S, 40000, 80, 1001, 9001, ACK | PSH, payload));
        assert_eq!(sids(&[plain], &frames), sids(&[decorated], &frames));
    }
}

#[test]
fn content_rule_with_packet_conditions() {
    let rule =
        "alert tcp any any -> any 80 (flow:established; flags:+P; content:\"hi\"; ttl:64; sid:1;)";
    let mut frames = handshake(80);
    frames.push(tcp_v4(C, S, 40000, 80, 1001, 9001, ACK, b"hi"));
    assert!(sids(&[rule], &frames).is_empty());
    let mut frames = handshake(80);
    frames.push(tcp_v4(C, S, 40000, 80, 1001, 9001, ACK | PSH, b"hi"));
    assert_eq!(sids(&[rule], &frames), vec![1]);
}

#[test]
fn keywords_that_would_change_matching_skip_the_rule() {
    let v = Vars::new();
    let reason = |opts: &str| {
        rules::parse_rule(&format!("alert tcp any any -> any any ({opts} sid:1;)"), &v)
            .unwrap_err()
            .reason()
    };
    assert_eq!(reason("content:\"a\"; lua:x.lua;"), "keyword lua");
    // Two HTTP buffer flags on one pcre.
    assert_eq!(reason("pcre:\"/a;b/UZ\";"), "error: bad value");
    assert_eq!(reason("xbits:set,x,track tx;"), "keyword xbits track tx");
    assert_eq!(reason("byte_test:4,=,1,0,dce;"), "keyword byte_test dce");
    assert_eq!(reason("pcre:\"/(/\";"), "error: bad value");
    assert_eq!(
        reason("content:\"a\"; http.request_header;"),
        "keyword http.request_header"
    );
    assert_eq!(reason("frobnicate;"), "unknown keyword frobnicate");
    assert_eq!(
        reason("content:\"a\"; dsize:5; flow:only_stream;"),
        "dsize with flow:only_stream"
    );
    assert_eq!(reason("flow:only_frag;"), "flow only_frag");
    assert_eq!(reason("flags:Q;"), "error: bad value");
    assert_eq!(reason("dsize:10<>5;"), "error: bad value");
    let e = rules::parse_rule("alert dcerpc any any -> any any (sid:1;)", &v).unwrap_err();
    assert_eq!(e, RuleSyntax::UnsupportedProtocol("dcerpc".into()));
    assert_eq!(e.reason(), "protocol dcerpc");
    let e = rules::parse_rule(
        "alert icmp any any -> any any (flow:established; sid:1;)",
        &v,
    )
    .unwrap_err();
    assert_eq!(e.reason(), "flow established on icmp");
    let e = rules::parse_rule("reject tcp any any -> any any (sid:1;)", &v).unwrap_err();
    assert_eq!(e.reason(), "action reject");
    // `target` names a side (EVE's alert.source/target), as Suricata asks.
    assert_eq!(reason("target:x;"), "error: bad value");
    for t in ["dest_ip", "src_ip"] {
        let r = format!("alert tcp any any -> any any (target:{t}; sid:1;)");
        assert!(rules::parse_rule(&r, &v).is_ok(), "{t}");
    }
    // Every keyword of the table is classified, and informational ones load
    // (`tls.store` takes no value: Suricata refuses one).
    for (k, s) in rules::options::KEYWORDS {
        if *s == rules::Status::Ignored
            && !matches!(
                *k,
                "sid" | "rev" | "gid" | "priority" | "msg" | "target" | "tls.store" | "tls_store"
            )
        {
            let r = format!("alert tcp any any -> any any ({k}:x; sid:1;)");
            assert!(rules::parse_rule(&r, &v).is_ok(), "{k}");
        }
    }
}

#[test]
fn et_open_sample_loads_what_it_supports() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let text = std::fs::read_to_string(dir.join("et-open-sample.rules")).unwrap();
    let (loaded, skipped) = rules::parse_rules(
        &text,
        "et-open-sample.rules",
        &rules::suricata_default_vars(),
    );
    let sids: Vec<u32> = loaded.iter().map(|r| r.sid).collect();
    // ICMP itype/icode + content, UDP dsize + offset/depth, TCP fast_pattern,
    // a SYN scan (flags, threshold).
    // And the Oracle rule: two nocase contents and a pcre; and a DNS query
    // rule (dns.query, depth), a TLS SNI rule (tls.sni, dotprefix) and a
    // certificate rule (tls.cert_subject).
    assert_eq!(
        sids,
        vec![2026567, 2019491, 2027151, 2001219, 2012509, 2013016, 2010375, 2049149, 2025424]
    );
    let reasons: Vec<String> = skipped.iter().map(|e| e.msg.reason()).collect();
    assert_eq!(reasons, vec!["keyword ftpbounce"]);
    // The Oracle rule fires on the injection, not on the same calls without a
    // statement after them (its pcre).
    let oracle = |payload: &[u8]| {
        let mut frames = Vec::new();
        let (c, s) = ([8, 8, 8, 8], [10, 0, 0, 5]);
        frames.push(tcp_v4(c, s, 40000, 1521, 1000, 0, SYN, &[]));
        frames.push(tcp_v4(s, c, 1521, 40000, 9000, 1001, SYN | ACK, &[]));
        frames.push(tcp_v4(c, s, 40000, 1521, 1001, 9001, ACK, &[]));
        frames.push(tcp_v4(c, s, 40000, 1521, 1001, 9001, ACK | PSH, payload));
        let rule = loaded.iter().find(|r| r.sid == 2010375).unwrap().clone();
        let mut i = sluice_ips::Ips::new(vec![rule], vec![], Namespace(2), 300).unwrap();
        run(&mut i, &frames).0
    };
    assert_eq!(
        oracle(b"CTXSYS.DRVXTABC.CREATE_TABLES('x', dbms_sql.execute('select 1'))"),
        vec![(2010375, AlertAction::Allowed)]
    );
    assert!(oracle(b"ctxsys.drvxtabc.create_tables dbms_sql.execute").is_empty());
    // The NAT-PMP rule: a 16-byte response from port 5351 whose bytes 1..4 are
    // 82 00 00, from the home network outwards.
    let mut i = sluice_ips::Ips::new(loaded, skipped, Namespace(2), 300).unwrap();
    let mut resp = vec![0u8; 16];
    resp[1] = 0x82;
    let ok = udp_v4([192, 168, 0, 1], [8, 8, 8, 8], 5351, 4000, &resp);
    let short = udp_v4([192, 168, 0, 1], [8, 8, 8, 8], 5351, 4000, &resp[..15]);
    let (a, _) = run(&mut i, &[ok, short]);
    assert_eq!(a, vec![(2019491, AlertAction::Allowed)]);
    // "ET SCAN Potential SSH Scan": SYNs (ECN bits ignored) to port 22 of the
    // home network, once per 120 s per source when the 5th arrives.
    let syn = |k: u16| tcp_v4([8, 8, 8, 8], [10, 0, 0, 5], 40000 + k, 22, 1, 0, SYN, &[]);
    let four: Vec<Vec<u8>> = (0..4).map(syn).collect();
    let (a, _) = run(&mut i, &four);
    assert!(a.is_empty());
    let seven: Vec<Vec<u8>> = (0..7).map(syn).collect();
    let (a, _) = run(&mut i, &seven);
    assert_eq!(a, vec![(2001219, AlertAction::Allowed)]);
}

#[test]
fn thresholds_count_as_suricata_does() {
    let from = |src: [u8; 4]| udp_v4(src, S, 5000, 53, b"scan");
    let five: Vec<Vec<u8>> = (0..5).map(|_| from(C)).collect();
    let count = |t: &str, frames: &[Vec<u8>]| {
        let rule = format!("alert udp any any -> any any (content:\"scan\"; {t}; sid:7;)");
        run(&mut ips(&[&rule]), frames).0.len()
    };
    // The first 2 of each window.
    assert_eq!(
        count(
            "threshold: type limit, track by_src, count 2, seconds 60",
            &five
        ),
        2
    );
    // Every 2nd: the 2nd and the 4th.
    assert_eq!(
        count(
            "threshold:type threshold,track by_src,count 2,seconds 60",
            &five
        ),
        2
    );
    // Once, at the 3rd.
    assert_eq!(
        count(
            "threshold: type both, track by_dst, count 3, seconds 60",
            &five
        ),
        1
    );
    assert_eq!(
        count(
            "threshold: type both, track by_dst, count 6, seconds 60",
            &five
        ),
        0
    );
    // Every match after the 3rd: the 4th and the 5th.
    assert_eq!(
        count("detection_filter: track by_src, count 3, seconds 60", &five),
        2
    );
    // Sources are counted apart by_src, together by_rule.
    let two = vec![from(C), from([10, 0, 0, 9]), from(C)];
    assert_eq!(
        count(
            "threshold: type limit, track by_src, count 1, seconds 60",
            &two
        ),
        2
    );
    assert_eq!(
        count(
            "threshold: type limit, track by_rule, count 1, seconds 60",
            &two
        ),
        1
    );
    assert_eq!(
        count(
            "threshold: type limit, track by_both, count 1, seconds 60",
            &two
        ),
        2
    );
    // An address pair either way is one pair (Suricata's IP pair); a flow
    // either way one flow, another port another flow.
    let back = udp_v4(S, C, 53, 5000, b"scan");
    let pair = vec![from(C), back.clone(), udp_v4(C, S, 5001, 53, b"scan")];
    assert_eq!(
        count(
            "threshold: type limit, track by_both, count 1, seconds 60",
            &pair
        ),
        1
    );
    assert_eq!(
        count(
            "threshold: type limit, track by_flow, count 1, seconds 60",
            &pair
        ),
        2
    );
    assert_eq!(
        count(
            "detection_filter: track by_flow, count 1, seconds 60",
            &pair
        ),
        1
    );
}

#[test]
fn threshold_windows_live_in_the_store() {
    let rule = "alert udp any any -> any any (content:\"scan\"; threshold: type limit, track by_src, count 2, seconds 10; sid:7;)";
    let pkt = udp_v4(C, S, 5000, 53, b"scan");
    let mut st = LocalStore::new();
    let s = 1_000_000_000u64;
    // Two instances sharing the store share the count: 1 + 1 alerts, then none.
    let (mut a, mut b) = (ips(&[rule]), ips(&[rule]));
    assert_eq!(
        run_in(&mut a, &mut st, std::slice::from_ref(&pkt), s)
            .0
            .len(),
        1
    );
    assert_eq!(
        run_in(&mut b, &mut st, &[pkt.clone(), pkt.clone()], 2 * s)
            .0
            .len(),
        1
    );
    assert_eq!(
        run_in(&mut a, &mut st, std::slice::from_ref(&pkt), 3 * s)
            .0
            .len(),
        0
    );
    let mut c = Vec::new();
    a.counters(&mut c);
    assert!(c.contains(&("ips_thresholded", 1)), "{c:?}");
    // The window (10 s from the first match) ends: its timer deletes the record
    // and counting starts over.
    let mut events = Vec::new();
    let mut emit = Vec::new();
    let streams = Streams::default();
    let mut ctx = Ctx {
        now_ns: 12 * s,
        stage: 2,
        streams: &streams,
        events: &mut events,
        emit: &mut emit,
    };
    a.on_timers(&mut ctx, &mut st).unwrap();
    let mut left = Vec::new();
    st.take_expired(Namespace(2), u64::MAX, 16, &mut left)
        .unwrap();
    assert!(left
        .iter()
        .all(|k| k.table() != sluice_ips::threshold::TABLE_THRESHOLD));
    assert_eq!(
        run_in(&mut b, &mut st, &[pkt.clone(), pkt.clone(), pkt], 13 * s)
            .0
            .len(),
        2
    );
}

#[test]
fn thresholds_parse_or_name_their_problem() {
    let v = Vars::new();
    let reason = |action: &str, opts: &str| {
        rules::parse_rule(
            &format!("{action} udp any any -> any any ({opts} sid:1;)"),
            &v,
        )
        .map(|_| String::new())
        .unwrap_or_else(|e| e.reason())
    };
    assert_eq!(
        reason(
            "alert",
            "threshold: track by_src, type limit, seconds 5, count 1;"
        ),
        ""
    );
    assert_eq!(
        reason(
            "drop",
            "threshold: type limit, track by_src, count 1, seconds 5;"
        ),
        "keyword threshold on a drop rule"
    );
    assert_eq!(
        reason(
            "alert",
            "threshold: type limit, track by_fleet, count 1, seconds 5;"
        ),
        "error: bad value"
    );
    assert_eq!(
        reason("alert", "threshold: type limit, count 1, seconds 5;"),
        "error: bad value"
    );
    assert_eq!(reason("alert", "detection_filter: track by_dst, count 1, seconds 5; threshold: type limit, track by_src, count 1, seconds 5;"), "error: two thresholds");
}

mod fuzz {
    use proptest::prelude::*;
    use sluice_ips::rules::{parse_rule, Vars};

    proptest! {
        #[test]
        fn random_text_never_panics(s in ".{0,200}") {
            let _ = parse_rule(&s, &Vars::new());
            let _ = parse_rule(&format!("alert tcp any any -> any any ({s})"), &Vars::new());
        }

        #[test]
        fn rule_shaped_text_never_panics(
            opts in proptest::collection::vec(
                "(dsize|flags|itype|icode|ip_proto|ttl|flow|content|threshold|fast_pattern|sameip|noalert|depth|distance)(:[!<>=*+0-9a-zA-Z,_ \\-\"|]{0,12})?",
                0..8,
            )
        ) {
            let line = format!("alert ip any any -> any any ({} sid:1;)", opts.join("; ") + ";");
            let _ = parse_rule(&line, &Vars::new());
        }
    }
}

#[test]
fn a_detection_filter_counts_matches_within_one_tcp_flow() {
    // Five "USER root" attempts on one connection: with alerts per match the
    // filter sees five matches and lets the 4th and 5th through (it saw one
    // per flow and direction before, so a brute force on one connection never
    // alerted).
    let rule = r#"alert tcp any any -> any 21 (msg:"brute"; flow:established,to_server; content:"USER root"; detection_filter: track by_src, count 3, seconds 60; sid:8;)"#;
    let mut f = vec![
        tcp_v4(C, S, 40000, 21, 1000, 0, SYN, &[]),
        tcp_v4(S, C, 21, 40000, 9000, 1001, SYN | ACK, &[]),
        tcp_v4(C, S, 40000, 21, 1001, 9001, ACK, &[]),
    ];
    let line = b"USER root\r\n";
    for k in 0..5u32 {
        f.push(tcp_v4(
            C,
            S,
            40000,
            21,
            1001 + k * line.len() as u32,
            9001,
            ACK | PSH,
            line,
        ));
    }
    let (a, _) = run(&mut ips(&[rule]), &f);
    assert_eq!(
        a,
        vec![(8, AlertAction::Allowed), (8, AlertAction::Allowed)]
    );
}

/// Suricata orders signatures so that those setting a flowbit run before
/// those reading it: a bit set and tested by two rules on one packet is
/// seen whatever the rules' order in the file.
#[test]
fn flowbits_set_before_read_on_one_packet() {
    let read =
        "alert udp any any -> any any (msg:\"read\"; content:\"x\"; flowbits:isset,b; sid:1;)";
    let set = "alert udp any any -> any any (msg:\"set\"; content:\"x\"; flowbits:set,b; sid:2;)";
    let both = "alert udp any any -> any any (msg:\"both\"; content:\"x\"; flowbits:isset,b; flowbits:set,c; sid:3;)";
    let late = "alert udp any any -> any any (msg:\"after both\"; content:\"x\"; flowbits:isset,c; sid:4;)";
    let frames = [udp(3)];
    // Set only, then set-and-read, then read only: 2, 3, then 1 and 4.
    assert_eq!(sids(&[read, late, both, set], &frames), vec![2, 3, 1, 4]);
    assert_eq!(sids(&[set, read], &frames), vec![2, 1]);
}

/// Suricata inspects a TCP stream rule with `depth` or `offset` over each
/// packet's own payload too: a command at the start of every segment of a
/// kept-alive connection matches each time, not only at the stream's start
/// (an attacker cannot hide one behind a harmless first message); once per
/// packet whichever way it matches; `only_stream` keeps it on the stream.
#[test]
fn depth_and_offset_rules_also_match_each_segment() {
    let mut frames = handshake(25);
    frames.push(tcp_v4(
        C,
        S,
        40000,
        25,
        1001,
        9001,
        ACK | PSH,
        b"HELO one\r\n",
    ));
    frames.push(tcp_v4(
        C,
        S,
        40000,
        25,
        1011,
        9001,
        ACK | PSH,
        b"HELO two\r\n",
    ));
    frames.push(tcp_v4(
        C,
        S,
        40000,
        25,
        1021,
        9001,
        ACK | PSH,
        b"xx HELO\r\n",
    ));
    let depth = "alert tcp any any -> any 25 (content:\"HELO\"; depth:4; sid:1;)";
    let offset = "alert tcp any any -> any 25 (content:\"two\"; offset:5; depth:3; sid:2;)";
    let stream_only =
        "alert tcp any any -> any 25 (content:\"HELO\"; depth:4; flow:only_stream; sid:3;)";
    let plain = "alert tcp any any -> any 25 (content:\"HELO\"; sid:4;)";
    assert_eq!(sids(&[depth], &frames), vec![1, 1]);
    assert_eq!(sids(&[offset], &frames), vec![2]);
    assert_eq!(sids(&[stream_only], &frames), vec![3]);
    assert_eq!(sids(&[plain], &frames), vec![4, 4, 4]);
}

/// Suricata's checksum keywords (detect-csum.c): each of its protocol and
/// family only, `valid` or `invalid` as the packet arrived.
#[test]
fn checksum_keywords() {
    let good = udp(4);
    let mut bad_l4 = good.clone();
    // The UDP checksum's low byte (Ethernet 14 + IPv4 20 + 7).
    bad_l4[41] ^= 0xff;
    let hits = |opt: &str| -> Vec<bool> {
        let rule = format!("alert ip any any -> any any ({opt}; sid:1;)");
        let mut i = ips(&[&rule]);
        [&good, &bad_l4]
            .iter()
            .map(|f| !run(&mut i, std::slice::from_ref(*f)).0.is_empty())
            .collect()
    };
    assert_eq!(hits("udpv4-csum:valid"), [true, false]);
    assert_eq!(hits("udpv4-csum:invalid"), [false, true]);
    assert_eq!(hits("ipv4-csum:valid"), [true, true]);
    assert_eq!(hits("ipv4-csum:invalid"), [false, false]);
    // Another protocol or family never matches.
    assert_eq!(hits("tcpv4-csum:invalid"), [false; 2]);
    assert_eq!(hits("udpv6-csum:valid"), [false; 2]);
    // A bad IPv4 header is refused by the parse unless checksums are not
    // verified (`verify_checksums: none`): only then can `ipv4-csum:invalid`
    // see one.
    let mut bad_ip = good.clone();
    bad_ip[25] ^= 0xff; // Ethernet 14 + 11: the header checksum's low byte
    assert!(sluice_wire::parse::parse_frame(&bad_ip).is_err());
    let v = Vars::new();
    let e = rules::parse_rule("alert ip any any -> any any (tcpv4-csum:maybe; sid:1;)", &v);
    assert_eq!(e.unwrap_err().reason(), "error: bad value");
}
