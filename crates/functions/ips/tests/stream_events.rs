//! `stream-event`: Suricata's TCP stream events, raised by the reassembler
//! on the record a packet found, matched like the other per-packet
//! conditions; the events it cannot decide refuse their rules.

use sluice_ips::rules::{parse_rule, RuleSyntax, Vars};
use sluice_nf::NetworkFunction;
use sluice_state::LocalStore;
use sluice_wire::build::tcp_v4;
use sluice_wire::tcp::flags::{ACK, FIN, PSH, RST, SYN};

mod common;
use common::run_in;

const C: [u8; 4] = [10, 0, 0, 1];
const S: [u8; 4] = [192, 168, 1, 2];
const ISN_C: u32 = 1000;
const ISN_S: u32 = 9000;

fn c2s(seq: u32, ack: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    tcp_v4(C, S, 40000, 80, seq, ack, flags, payload)
}

fn s2c(seq: u32, ack: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    tcp_v4(S, C, 80, 40000, seq, ack, flags, payload)
}

fn rule(sid: u32, event: &str) -> String {
    format!("alert tcp any any -> any any (msg:\"{event}\"; stream-event:{event}; sid:{sid};)")
}

/// The sids of the alerts `rules` raise over `frames`, each frame its own
/// batch over one store.
fn sids(rules: &[String], frames: &[Vec<u8>]) -> Vec<u32> {
    let refs: Vec<&str> = rules.iter().map(String::as_str).collect();
    let mut ips = common::ips_with(&refs, &[]);
    let mut st = LocalStore::new();
    let mut out = Vec::new();
    for (k, f) in frames.iter().enumerate() {
        let t = 1_000_000_000 + k as u64 * 1_000_000;
        let (a, _) = run_in(&mut ips, &mut st, std::slice::from_ref(f), t);
        out.extend(a.iter().map(|a| a.0));
    }
    out
}

fn handshake() -> Vec<Vec<u8>> {
    vec![
        c2s(ISN_C, 0, SYN, &[]),
        s2c(ISN_S, ISN_C + 1, SYN | ACK, &[]),
        c2s(ISN_C + 1, ISN_S + 1, ACK, &[]),
    ]
}

#[test]
fn handshake_events_fire_on_their_packet_only() {
    let rules = [
        rule(1, "3whs_synack_with_wrong_ack"),
        rule(2, "3whs_synack_in_wrong_direction"),
        rule(3, "est_syn_resend"),
        rule(4, "est_syn_resend_diff_seq"),
        rule(5, "est_synack_toserver"),
    ];
    let frames = [
        c2s(ISN_C, 0, SYN, &[]),
        s2c(4242, ISN_C + 9, SYN | ACK, &[]),
        c2s(ISN_C, ISN_S + 1, SYN | ACK, &[]),
        s2c(ISN_S, ISN_C + 1, SYN | ACK, &[]),
        c2s(ISN_C + 1, ISN_S + 1, ACK, &[]),
        c2s(ISN_C + 1, ISN_S + 1, ACK | PSH, b"hello"),
        c2s(ISN_C, 0, SYN, &[]),
        c2s(ISN_C + 77, 0, SYN, &[]),
        c2s(ISN_C + 6, ISN_S + 1, SYN | ACK, &[]),
    ];
    assert_eq!(sids(&rules, &frames), [1, 2, 3, 4, 5]);
    // A normal connection raises none.
    let mut normal = handshake();
    normal.push(c2s(ISN_C + 1, ISN_S + 1, ACK | PSH, b"hello"));
    normal.push(s2c(ISN_S + 1, ISN_C + 6, ACK | PSH, b"world"));
    assert!(sids(&rules, &normal).is_empty());
}

#[test]
fn syn_recv_events_and_the_inline_ack_checks() {
    let rules = [
        rule(10, "3whs_ack_in_wrong_dir"),
        rule(11, "3whs_ack_data_inject"),
        rule(12, "3whs_right_seq_wrong_ack_evasion"),
        rule(13, "3whs_synack_toserver_on_syn_recv"),
        rule(14, "3whs_syn_toclient_on_syn_recv"),
        rule(15, "3whs_wrong_seq_wrong_ack"),
    ];
    let hs = &handshake()[..2];
    let case = |last: Vec<u8>| {
        let mut f = hs.to_vec();
        f.push(last);
        sids(&rules, &f)
    };
    assert_eq!(case(s2c(ISN_S + 1, ISN_C + 1, ACK, &[])), [10]);
    assert_eq!(case(s2c(ISN_S + 1, ISN_C + 1, ACK | PSH, b"x")), [11]);
    assert_eq!(case(c2s(ISN_C + 1, ISN_S + 7, ACK | PSH, b"x")), [12]);
    assert_eq!(case(c2s(ISN_C + 40, ISN_S + 7, ACK | PSH, b"x")), [15]);
    assert!(case(c2s(ISN_C + 40, ISN_S + 1, ACK | PSH, b"x")).is_empty());
    assert_eq!(case(c2s(ISN_C, ISN_S + 1, SYN | ACK, &[])), [13]);
    assert_eq!(case(s2c(ISN_S, 0, SYN, &[])), [14]);
    assert!(case(c2s(ISN_C + 1, ISN_S + 1, ACK, &[])).is_empty());
}

#[test]
fn broken_ack_is_decided_from_the_segment_alone() {
    // An acknowledgement number without the ACK flag, on a packet of no
    // tracked connection too. (A data segment without ACK never reaches
    // the IPS: the reassembler drops it.)
    let rules = [rule(20, "pkt_broken_ack")];
    let frames = [
        c2s(ISN_C, 5, SYN, &[]),
        c2s(ISN_C, 0, SYN, &[]),
        s2c(1, 2, PSH, &[]),
        s2c(1, 2, ACK | PSH, b"x"),
        tcp_v4(C, S, 5555, 81, 1, 9, PSH, &[]),
    ];
    assert_eq!(sids(&rules, &frames), [20, 20, 20]);
}

#[test]
fn rst_and_fin_of_no_connection() {
    let rules = [
        rule(50, "rst_but_no_session"),
        rule(51, "fin_but_no_session"),
    ];
    let mut frames = vec![
        c2s(ISN_C + 5, 0, RST, &[]),
        c2s(ISN_C + 5, ISN_S + 1, FIN | ACK, b"bye"),
    ];
    frames.extend(handshake());
    frames.push(s2c(ISN_S + 1, ISN_C + 1, RST | ACK, &[]));
    frames.push(c2s(ISN_C + 1, ISN_S + 1, FIN | ACK, &[]));
    assert_eq!(sids(&rules, &frames), [50, 51]);
}

#[test]
fn a_rule_with_two_events_needs_both() {
    let both = "alert tcp any any -> any any (stream-event:pkt_broken_ack; \
                stream-event:est_syn_resend_diff_seq; sid:30;)"
        .to_string();
    let mut frames = handshake();
    frames.push(c2s(ISN_C + 50, 0, SYN, &[]));
    frames.push(c2s(ISN_C + 50, 3, SYN, &[]));
    assert_eq!(sids(&[both], &frames), [30]);
}

#[test]
fn events_never_raised_here_load_and_never_match() {
    let rules = [
        rule(40, "wrong_thread"),
        rule(41, "reassembly_urgent_oob_limit_reached"),
        rule(42, "3whs_async_wrong_seq"),
    ];
    let mut frames = handshake();
    frames.push(c2s(ISN_C + 1, ISN_S + 1, ACK | PSH | 0x20, b"urgent"));
    frames.push(c2s(ISN_C + 1, 0, SYN, &[]));
    assert!(sids(&rules, &frames).is_empty());
}

#[test]
fn only_an_ips_with_stream_event_rules_asks_for_events() {
    let with = common::ips_with(&[rule(1, "est_syn_resend").as_str()], &[]);
    let without = common::ips_with(&["alert tcp any any -> any any (flags:S; sid:2;)"], &[]);
    assert!(with.wants_stream_events());
    assert!(!without.wants_stream_events());
}

#[test]
fn events_not_decided_here_refuse_their_rule_with_the_reason() {
    let vars = Vars::default();
    for (event, why) in [
        ("est_invalid_ack", "last acknowledgements"),
        (
            "reassembly_overlap_different_data",
            "segments already delivered",
        ),
        ("pkt_invalid_timestamp", "timestamps"),
        ("3whs_synack_flood", "queue"),
    ] {
        match parse_rule(&rule(1, event), &vars) {
            Err(RuleSyntax::UnsupportedKeyword(k)) => {
                assert!(k.starts_with(&format!("stream-event {event}")), "{k}");
                assert!(k.contains(why), "{k}");
            }
            other => panic!("{event}: {other:?}"),
        }
    }
    assert!(parse_rule(&rule(1, "no_such_event"), &vars).is_err());
    assert!(parse_rule(&rule(1, "est_syn_resend"), &vars).is_ok());
}
