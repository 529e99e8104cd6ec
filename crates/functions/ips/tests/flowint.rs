//! `flowint`: integers per flow kept in the flow's store record
//! ([`sluice_ips::flowint`]), with the examples of Suricata's documentation
//! (rules/flow-keywords, "flowint") and ET Open's rules that use it.

use sluice_ips::rules::{parse_rule, FlowintOp, FlowintVal, RuleSyntax, Vars};
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

/// The sids alerted when `payloads` are datagrams of one UDP flow, in one
/// batch.
fn on_flow(rules: &[&str], payloads: &[&[u8]]) -> Vec<u32> {
    let frames: Vec<Vec<u8>> = payloads.iter().map(|p| udp_v4(C, S, 5000, 53, p)).collect();
    common::run_in(&mut ips(rules), &mut LocalStore::new(), &frames, 1)
        .0
        .into_iter()
        .map(|a| a.0)
        .collect()
}

/// Suricata's documentation: "Counting Usernames" counts silently, and the
/// second rule fires once the counter is above 5. A rule's conditions are
/// checked before its own changes, which apply only when it matched (so the
/// second rule adds only from its first match on).
#[test]
fn the_documentation_username_counter() {
    let rules = [
        "alert udp any any -> any any (msg:\"Counting Usernames\"; content:\"jonkman\"; flowint: usernamecount, +, 1; noalert; sid:1;)",
        "alert udp any any -> any any (msg:\"More than Five Usernames!\"; content:\"jonkman\"; flowint: usernamecount, +, 1; flowint:usernamecount, >, 5; sid:2;)",
    ];
    let p: &[u8] = b"user jonkman";
    // Five packets: at most 5.
    assert_eq!(on_flow(&rules, &[p; 5]), Vec::<u32>::new());
    // The sixth packet makes 6 (> 5) before sid 2 checks it if sid 1 runs
    // first on a packet, the seventh otherwise; from then on every packet.
    let eight = on_flow(&rules, &[p; 8]);
    assert!(eight == vec![2, 2, 2] || eight == vec![2, 2], "{eight:?}");
}

/// Suricata's documentation's set of five rules: a counter set on `GET`,
/// added to on `Unauthorized`, a second counter created at 3 and counted on
/// every packet, and a rule firing when it reaches `maxvar`.
#[test]
fn the_documentation_counters_with_isset_notset_and_a_variable_operand() {
    let rules = [
        "alert udp any any -> any any (msg:\"Setting a flowint counter\"; content:\"GET\"; flowint:myvar, notset; flowint:maxvar,notset; flowint:myvar,=,1; flowint: maxvar,=,6; sid:1;)",
        "alert udp any any -> any any (msg:\"Adding to flowint counter\"; content:\"Unauthorized\"; flowint:myvar,isset; flowint: myvar,+,2; sid:2;)",
        "alert udp any any -> any any (msg:\"when flowint counter is 3 create new counter\"; content:\"Unauthorized\"; flowint:myvar, isset; flowint:myvar,==,3; flowint:cntpackets,notset; flowint:cntpackets, =, 0; sid:3;)",
        "alert udp any any -> any any (msg:\"count the rest without generating alerts\"; flowint:cntpackets,isset; flowint:cntpackets, +, 1; noalert; sid:4;)",
        "alert udp any any -> any any (msg:\"fire this when it reach 6\"; flowint: cntpackets, isset; flowint: maxvar,isset; flowint: cntpackets, ==, maxvar; sid:5;)",
    ];
    let o: &[u8] = b"other";
    // Rules are evaluated in order on each packet: packet 2 adds 2 (myvar
    // 3), then sid 3 sees 3 and creates cntpackets = 0; sid 4 (no
    // content: every packet) counts from the same packet on.
    let got = on_flow(
        &rules,
        &[b"GET /", b"Unauthorized", o, o, o, o, o, o, o, b"GET /"],
    );
    // Packet 1: sid 1. Packet 2: sid 2 (myvar 3), then sid 3 (cntpackets
    // 0). sid 4 counts every packet from then on and sid 5 fires once, on
    // the packet where the count is 6 (whichever of sids 4 and 5 a packet
    // evaluates first, the count passes 6 once). The second GET finds
    // myvar set: sid 1 does not fire again.
    assert_eq!(got, vec![1, 2, 3, 5]);
}

#[test]
fn comparisons_need_the_variable_set_and_sub_does_not_create_it() {
    let rules = [
        "alert udp any any -> any any (content:\"dec\"; flowint:nn,-,1; noalert; sid:1;)",
        "alert udp any any -> any any (content:\"inc\"; flowint:nn,+,10; noalert; sid:2;)",
        "alert udp any any -> any any (content:\"lt\"; flowint:nn,<,100; sid:3;)",
        "alert udp any any -> any any (content:\"ne\"; flowint:nn,!=,7; sid:4;)",
        "alert udp any any -> any any (content:\"le\"; flowint:nn,<=,9; sid:5;)",
        "alert udp any any -> any any (content:\"set\"; flowint:nn,=,4294967295; noalert; sid:6;)",
        "alert udp any any -> any any (content:\"ge\"; flowint:nn,>=,4294967295; sid:7;)",
    ];
    // Unset: no comparison holds, and `-` leaves it unset.
    assert_eq!(on_flow(&rules, &[b"dec", b"lt", b"ne"]), Vec::<u32>::new());
    // 10 - 1 = 9.
    assert_eq!(
        on_flow(&rules, &[b"inc", b"dec", b"lt", b"ne", b"le"]),
        vec![3, 4, 5]
    );
    // u32 arithmetic wraps: max + 10 = 9.
    assert_eq!(
        on_flow(&rules, &[b"set", b"ge", b"inc", b"ge", b"le"]),
        vec![7, 5]
    );
}

#[test]
fn the_counters_are_per_flow() {
    let rules = [
        "alert udp any any -> any any (content:\"x\"; flowint:nn,+,1; noalert; sid:1;)",
        "alert udp any any -> any any (content:\"y\"; flowint:nn,==,1; sid:2;)",
    ];
    let frames = [
        udp_v4(C, S, 5000, 53, b"x"),
        udp_v4(C, S, 5001, 53, b"x"),
        udp_v4(C, S, 5001, 53, b"x"),
        // The reply shares the first flow's counter (1); the other flow's
        // is 2.
        udp_v4(S, C, 53, 5000, b"y"),
        udp_v4(C, S, 5001, 53, b"y"),
    ];
    let (a, _) = common::run_in(&mut ips(&rules), &mut LocalStore::new(), &frames, 1);
    assert_eq!(a.iter().map(|a| a.0).collect::<Vec<_>>(), vec![2]);
}

fn handshake() -> Vec<Vec<u8>> {
    vec![
        tcp_v4(C, S, 40000, 80, 1000, 0, SYN, &[]),
        tcp_v4(S, C, 80, 40000, 9000, 1001, SYN | ACK, &[]),
        tcp_v4(C, S, 40000, 80, 1001, 9001, ACK, &[]),
    ]
}

/// Over TCP the counter is in the flow's store record: another instance,
/// sharing nothing but the store, continues it.
#[test]
fn the_counter_lives_in_the_store_across_instances() {
    let rules = [
        "alert tcp any any -> any 80 (flow:to_server; content:\"try\"; flowint:tries,+,1; noalert; sid:1;)",
        "alert tcp any 80 -> any any (flow:to_client; content:\"denied\"; flowint:tries,>=,2; sid:2;)",
    ];
    let mut st = LocalStore::new();
    let mut frames = handshake();
    frames.push(tcp_v4(C, S, 40000, 80, 1001, 9001, ACK | PSH, b"try 1"));
    frames.push(tcp_v4(S, C, 80, 40000, 9001, 1006, ACK | PSH, b"denied"));
    let t = 1_000_000_000;
    let (a, _) = common::run_in(&mut ips(&rules), &mut st, &frames, t);
    assert!(a.is_empty(), "{a:?}");
    let more = [
        tcp_v4(C, S, 40000, 80, 1006, 9007, ACK | PSH, b"try 2"),
        tcp_v4(S, C, 80, 40000, 9007, 1011, ACK | PSH, b"denied"),
    ];
    let (a, _) = common::run_in(&mut ips(&rules), &mut st, &more, t + 1_000_000);
    assert_eq!(a.iter().map(|a| a.0).collect::<Vec<_>>(), vec![2]);
    // The same second half on a fresh store: the flow has no counter.
    let (a, _) = common::run_in(&mut ips(&rules), &mut LocalStore::new(), &more, t);
    assert!(a.is_empty(), "{a:?}");
}

/// ET Open's rules (sid 2044301...) count downloads with
/// `flowint: ET.infostealer.dll.download, +, 1;` (spaces after the commas)
/// alongside `xbits:set`: they load, alert, and count.
#[test]
fn et_open_infostealer_rules_load_and_count() {
    let et = "alert http $HOME_NET any -> $EXTERNAL_NET any (msg:\"ET HUNTING HTTP GET Request for sqlite3.dll - Possible Infostealer Activity\"; flow:established,to_server; http.method; content:\"GET\"; http.uri; content:\"sqlite3.dll\"; fast_pattern; xbits:set,ET.infostealer.pattern.1,track ip_src,expire 15; xbits:set,ET.infostealer.pattern.2,track ip_pair,expire 15; flowint: ET.infostealer.dll.download, +, 1; classtype:suspicious-filename-detect; sid:2044301; rev:1; metadata:created_at 2023_02_22;)";
    let two = "alert http any any -> any any (msg:\"second download\"; flow:established,to_server; http.uri; content:\".dll\"; flowint:ET.infostealer.dll.download,==,2; sid:9;)";
    let mut ips = common::ips_with(
        &[et, two],
        &[("HOME_NET", "10.0.0.0/8"), ("EXTERNAL_NET", "!$HOME_NET")],
    );
    let mut frames = handshake();
    let req = b"GET /a/sqlite3.dll HTTP/1.1\r\nHost: x\r\n\r\n";
    for k in 0..3u32 {
        let seq = 1001 + k * req.len() as u32;
        frames.push(tcp_v4(C, S, 40000, 80, seq, 9001, ACK | PSH, req));
    }
    let (a, _) = common::run_in(&mut ips, &mut LocalStore::new(), &frames, 1_000_000_000);
    let sids: Vec<u32> = a.iter().map(|a| a.0).collect();
    assert_eq!(
        sids.iter().filter(|&&s| s == 2044301).count(),
        3,
        "{sids:?}"
    );
    // sid 9 sees the count at 2 once: on the second request if it runs
    // after the ET rule on a packet, on the third if before.
    assert_eq!(sids.iter().filter(|&&s| s == 9).count(), 1, "{sids:?}");
}

#[test]
fn parsing_follows_suricatas_regex() {
    let p = |o: &str| {
        parse_rule(
            &format!("alert udp any any -> any any ({o} sid:1;)"),
            &Vars::new(),
        )
        .map(|r| r.flowints)
    };
    let f = p("flowint: ET.a/b_c, +, 1;").unwrap();
    assert_eq!(f[0].name, "ET.a/b_c");
    assert_eq!(f[0].op, FlowintOp::Add);
    assert_eq!(f[0].val, Some(FlowintVal::Num(1)));
    let f = p("flowint:x1,==,other_var;").unwrap();
    assert_eq!(f[0].val, Some(FlowintVal::Var("other_var".into())));
    assert_eq!(p("flowint:x1,isnotset;").unwrap()[0].op, FlowintOp::NotSet);
    assert_eq!(p("flowint:x1,notset;").unwrap()[0].op, FlowintOp::NotSet);
    assert_eq!(p("flowint:x1,isset;").unwrap()[0].val, None);
    assert_eq!(
        p("flowint:x1,=,4294967295;").unwrap()[0].val,
        Some(FlowintVal::Num(u32::MAX))
    );
    for bad in [
        "flowint:x1,=,4294967296;", // above u32
        "flowint:x1,=,12345678901;",
        "flowint:x,=,1;",  // names have at least two characters
        "flowint:1x,=,1;", // and start with a letter
        "flowint:x1,=;",   // a change needs a value
        "flowint:x1,>;",
        "flowint:x1,=>,1;", // unknown operator
        "flowint:x1,=,a.b;",
        "flowint:x1,=,-1;",
        "flowint:x1;",
    ] {
        assert!(
            matches!(p(bad), Err(RuleSyntax::BadValue { .. })),
            "{bad}: {:?}",
            p(bad)
        );
    }
    // A change cannot wait for an xbits condition decided after the batch.
    let r = p("content:\"a\"; xbits:isset,b,track ip_src; flowint:x1,+,1;");
    assert!(matches!(r, Err(RuleSyntax::UnsupportedKeyword(_))), "{r:?}");
    // A condition can.
    assert!(p("content:\"a\"; xbits:isset,b,track ip_src; flowint:x1,>,1;").is_ok());
}

/// The record carries the variables (version 7, 6 bytes each) and a
/// version 6 record still decodes without them.
#[test]
fn the_variables_round_trip_through_the_record() {
    use sluice_ips::engine::{record_size, FlowState};
    use sluice_state::{Codec, Reader, Writer};
    let mut st = FlowState::default();
    st.ints.set(0, 7);
    st.ints.set(3, u32::MAX);
    let mut buf = Vec::new();
    st.encode(&mut Writer::new(&mut buf));
    assert_eq!(buf.len(), record_size(0) + 12);
    assert_eq!(FlowState::decode(&mut Reader::new(&buf)).unwrap(), st);
    let mut v6 = buf[..record_size(0) - 1].to_vec();
    v6[0] = 6;
    assert_eq!(
        FlowState::decode(&mut Reader::new(&v6)).unwrap(),
        FlowState::default()
    );
}
