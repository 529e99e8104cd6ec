//! DNS app-layer events (`app-layer-event:dns.NAME`) through the engine,
//! with the rules of Suricata's dns-events.rules: over UDP and over TCP,
//! the frames in one batch and one packet per batch through the store.

use sluice_ips::rules;
use sluice_ips::Ips;
use sluice_state::LocalStore;
use sluice_wire::build::{tcp_v4, udp_v4};
use sluice_wire::tcp::flags::{ACK, PSH, SYN};

mod common;

const C: [u8; 4] = [10, 0, 0, 1];
const S: [u8; 4] = [192, 168, 1, 2];

/// Suricata 7.0.10's dns-events.rules, as shipped.
const RULES: &[&str] = &[
    r#"alert dns any any -> any any (msg:"SURICATA DNS malformed request data"; flow:to_server; app-layer-event:dns.malformed_data; classtype:protocol-command-decode; sid:2240002; rev:2;)"#,
    r#"alert dns any any -> any any (msg:"SURICATA DNS malformed response data"; flow:to_client; app-layer-event:dns.malformed_data; classtype:protocol-command-decode; sid:2240003; rev:2;)"#,
    r#"alert dns any any -> any any (msg:"SURICATA DNS Not a request"; flow:to_server; app-layer-event:dns.not_request; classtype:protocol-command-decode; sid:2240004; rev:3;)"#,
    r#"alert dns any any -> any any (msg:"SURICATA DNS Not a response"; flow:to_client; app-layer-event:dns.not_response; classtype:protocol-command-decode; sid:2240005; rev:3;)"#,
    r#"alert dns any any -> any any (msg:"SURICATA DNS Z flag set"; app-layer-event:dns.z_flag_set; classtype:protocol-command-decode; sid:2240006; rev:2;)"#,
    r#"alert dns any any -> any any (msg:"SURICATA DNS Invalid opcode"; app-layer-event:dns.invalid_opcode; classtype:protocol-command-decode; sid:2240007; rev:1;)"#,
    r#"alert dns any any -> any any (msg:"SURICATA DNS Name too long"; app-layer-event:dns.name_too_long; classtype:protocol-command-decode; sid:224008; rev:1;)"#,
    r#"alert dns any any -> any any (msg:"SURICATA DNS Infinite loop"; app-layer-event:dns.infinite_loop; classtype:protocol-command-decode; sid:224009; rev:1;)"#,
    r#"alert dns any any -> any any (msg:"SURICATA DNS Too many labels"; app-layer-event:dns.too_many_labels; classtype:protocol-command-decode; sid:224010; rev:1;)"#,
];

fn ips() -> Ips {
    common::ips_with(RULES, &[("HOME_NET", "10.0.0.0/8")])
}

/// Sids alerting on `frames`, sorted: in one batch, then one packet per
/// batch through the store (which must agree).
fn sids(frames: &[Vec<u8>]) -> Vec<u32> {
    let (alerts, _) = common::run_in(&mut ips(), &mut LocalStore::new(), frames, 1_000_000_000);
    let mut one: Vec<u32> = alerts.into_iter().map(|a| a.0).collect();
    one.sort_unstable();
    let (mut each, _, _) = common::run_each(ips(), frames);
    each.sort_unstable();
    assert_eq!(one, each, "one batch and one packet per batch differ");
    one
}

fn message(flags: u16, counts: [u16; 4], body: &[u8]) -> Vec<u8> {
    let mut m = vec![0x12, 0x34];
    m.extend_from_slice(&flags.to_be_bytes());
    for c in counts {
        m.extend_from_slice(&c.to_be_bytes());
    }
    m.extend_from_slice(body);
    m
}

/// A query with `flags` for the name in wire form `name`.
fn query(flags: u16, name: &[u8]) -> Vec<u8> {
    let mut b = name.to_vec();
    b.extend_from_slice(&[0, 1, 0, 1]);
    message(flags, [1, 0, 0, 0], &b)
}

/// The answer to a query for `name` with `flags`.
fn response(flags: u16, name: &[u8]) -> Vec<u8> {
    let mut b = name.to_vec();
    b.extend_from_slice(&[
        0, 1, 0, 1, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 10, 0, 0, 9,
    ]);
    message(flags, [1, 1, 0, 0], &b)
}

const EX: &[u8] = b"\x07example\x03com\x00";

fn udp_q(sport: u16, m: &[u8]) -> Vec<u8> {
    udp_v4(C, S, sport, 53, m)
}

fn udp_r(sport: u16, m: &[u8]) -> Vec<u8> {
    udp_v4(S, C, 53, sport, m)
}

#[test]
fn the_shipped_rules_load() {
    for r in RULES {
        assert!(
            rules::parse_rule(r, &rules::suricata_default_vars()).is_ok(),
            "{r}"
        );
    }
    let load = |r: &str| rules::parse_rule(r, &rules::suricata_default_vars());
    // A name Suricata does not know is refused, as there.
    assert!(load("alert dns any any -> any any (app-layer-event:dns.nope; sid:1;)").is_err());
    // On a udp rule the event is skipped, named.
    let e =
        load("alert udp any any -> any any (app-layer-event:dns.z_flag_set; sid:1;)").unwrap_err();
    assert_eq!(
        e.reason(),
        "keyword app-layer-event dns.z_flag_set on a udp rule"
    );
    // The events not decided stay skipped with their name.
    let e = load("alert ssh any any -> any any (app-layer-event:ssh.invalid_record; sid:1;)")
        .unwrap_err();
    assert_eq!(
        e.reason(),
        "keyword app-layer-event ssh.invalid_record: needs the SSH records tracked across segments"
    );
    let e = load(
        "alert smtp any any -> any any (app-layer-event:smtp.max_command_line_len_exceeded; sid:1;)",
    )
    .unwrap_err();
    assert_eq!(
        e.reason(),
        "keyword app-layer-event smtp.max_command_line_len_exceeded"
    );
    // FTP's line events are decided ([`sluice_ips::ftp`]).
    assert!(load(
        "alert ftp any any -> any any (app-layer-event:ftp.request_command_too_long; sid:1;)"
    )
    .is_ok());
}

#[test]
fn udp_header_and_name_events() {
    // Z set in a query, then in a response; AD and CD are not Z.
    assert_eq!(
        sids(&[
            udp_q(40001, &query(0x0140, EX)),
            udp_r(40001, &response(0x8180, EX))
        ]),
        vec![2240006]
    );
    assert_eq!(
        sids(&[
            udp_q(40002, &query(0x0100, EX)),
            udp_r(40002, &response(0x81c0, EX))
        ]),
        vec![2240006]
    );
    assert_eq!(
        sids(&[
            udp_q(40003, &query(0x0130, EX)),
            udp_r(40003, &response(0x81b0, EX))
        ]),
        Vec::<u32>::new()
    );
    // Opcode 7 and 15 (the last assigned is 6).
    assert_eq!(
        sids(&[udp_q(40004, &query(0x0100 | 7 << 11, EX))]),
        vec![2240007]
    );
    assert_eq!(
        sids(&[udp_q(40005, &query(0x0100 | 15 << 11, EX))]),
        vec![2240007]
    );
    assert_eq!(
        sids(&[udp_q(40006, &query(0x0100 | 6 << 11, EX))]),
        Vec::<u32>::new()
    );
    // A pointer to itself after a first one; two pointing at each other.
    let self_ptr = message(0x0100, [1, 0, 0, 0], b"\xc0\x0e\xc0\x0e\x00\x01");
    assert_eq!(sids(&[udp_q(40007, &self_ptr)]), vec![224009]);
    assert_eq!(
        sids(&[udp_q(40008, &query(0x0100, b"\xc0\x0e\xc0\x0c"))]),
        vec![224008, 224010]
    );
    // 17 labels of 63 bytes, no pointer.
    let long: Vec<u8> = (0..17)
        .flat_map(|_| std::iter::once(63).chain([b'a'; 63]))
        .chain([0])
        .collect();
    assert_eq!(sids(&[udp_q(40009, &query(0x0100, &long))]), vec![224008]);
}

#[test]
fn udp_events_on_the_transaction_before_are_not_seen() {
    // Suricata puts them on the previous transaction, already inspected: a
    // query then a truncated one; a response from the client; a message
    // with QR clear from the server.
    let q = query(0x0100, EX);
    assert_eq!(
        sids(&[udp_q(40011, &q), udp_q(40011, &q[..q.len() - 3])]),
        Vec::<u32>::new()
    );
    assert_eq!(
        sids(&[udp_q(40012, &q), udp_q(40012, &response(0x8180, EX))]),
        Vec::<u32>::new()
    );
    assert_eq!(
        sids(&[udp_q(40013, &q), udp_r(40013, &response(0x0100, EX))]),
        Vec::<u32>::new()
    );
}

/// `msg` after its 2-byte length.
fn framed(msg: &[u8]) -> Vec<u8> {
    let mut v = (msg.len() as u16).to_be_bytes().to_vec();
    v.extend_from_slice(msg);
    v
}

/// A connection to port 53 from `sport`: the handshake, then each segment
/// (`true`: from the client).
fn tcp_conn(sport: u16, segs: &[(bool, Vec<u8>)]) -> Vec<Vec<u8>> {
    let mut frames = vec![
        tcp_v4(C, S, sport, 53, 1000, 0, SYN, &[]),
        tcp_v4(S, C, 53, sport, 9000, 1001, SYN | ACK, &[]),
        tcp_v4(C, S, sport, 53, 1001, 9001, ACK, &[]),
    ];
    let (mut cs, mut ss) = (1001u32, 9001u32);
    for (to_server, s) in segs {
        if *to_server {
            frames.push(tcp_v4(C, S, sport, 53, cs, ss, ACK | PSH, s));
            cs += s.len() as u32;
        } else {
            frames.push(tcp_v4(S, C, 53, sport, ss, cs, ACK | PSH, s));
            ss += s.len() as u32;
        }
    }
    frames
}

#[test]
fn tcp_events() {
    let q = query(0x0100, EX);
    let z = query(0x0140, EX);
    assert_eq!(sids(&tcp_conn(40021, &[(true, framed(&z))])), vec![2240006]);
    let op7 = query(0x0100 | 7 << 11, EX);
    let r7 = response(0x8180 | 7 << 11, EX);
    assert_eq!(
        sids(&tcp_conn(
            40022,
            &[(true, framed(&op7)), (false, framed(&r7))]
        )),
        vec![2240007, 2240007]
    );
    // Pipelined: the event of the second message goes on the first one's
    // transaction, inspected after it.
    let mut two = framed(&q);
    two.extend(framed(&q[..q.len() - 3]));
    assert_eq!(sids(&tcp_conn(40023, &[(true, two)])), vec![2240002]);
    let mut two = framed(&q);
    two.extend(framed(&response(0x8180, EX)));
    assert_eq!(sids(&tcp_conn(40024, &[(true, two)])), vec![2240004]);
    let mut two = framed(&response(0x8180, EX));
    two.extend(framed(&response(0x0100, EX)));
    assert_eq!(
        sids(&tcp_conn(40025, &[(true, framed(&q)), (false, two)])),
        vec![2240005]
    );
    let r = response(0x8180, EX);
    let mut two = framed(&r);
    two.extend(framed(&r[..r.len() - 2]));
    assert_eq!(
        sids(&tcp_conn(40026, &[(true, framed(&q)), (false, two)])),
        vec![2240003]
    );
    // The same messages in segments of their own: nothing.
    let segs = [(true, framed(&q)), (true, framed(&q[..q.len() - 3]))];
    assert_eq!(sids(&tcp_conn(40027, &segs)), Vec::<u32>::new());
    let segs = [
        (true, framed(&q)),
        (false, framed(&r)),
        (false, framed(&response(0x0100, EX))),
    ];
    assert_eq!(sids(&tcp_conn(40028, &segs)), Vec::<u32>::new());
}

#[test]
fn no_event_rule_no_event_work() {
    // Without an event rule, a malformed message changes nothing for the
    // other DNS rules (the events are not decided).
    let rule = r#"alert dns any any -> any any (dns.query; content:"example"; sid:7;)"#;
    let q = query(0x0140, EX);
    let (a, _) = common::run_in(
        &mut common::ips_with(&[rule], &[]),
        &mut LocalStore::new(),
        &[udp_q(40031, &q)],
        1_000_000_000,
    );
    assert_eq!(a.len(), 1);
}
