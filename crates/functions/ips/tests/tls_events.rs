//! TLS app-layer events (`app-layer-event:tls.NAME`,
//! [`sluice_ips::tls::events`]) over exchanges whose segments each get the
//! other side's acknowledgement, in one batch and one packet per batch
//! through the store. The expected alerts are those Suricata 7.0.10 raises
//! on the same exchanges (the `tls-event-*` Scapy tests): once per
//! direction, on the first packet of each direction after the parse.

use sluice_ips::Ips;
use sluice_state::LocalStore;
use sluice_wire::build::tcp_v4;
use sluice_wire::tcp::flags::{ACK, PSH, SYN};

mod common;

const C: [u8; 4] = [10, 0, 0, 1];
const S: [u8; 4] = [192, 168, 1, 2];
const T0: u64 = 1_700_000_000_000_000_000;

fn rec(ct: u8, version: u16, body: &[u8]) -> Vec<u8> {
    let mut v = vec![ct];
    v.extend(version.to_be_bytes());
    v.extend((body.len() as u16).to_be_bytes());
    v.extend_from_slice(body);
    v
}

/// A ClientHello record and a ServerHello + ServerHelloDone record.
fn hellos() -> (Vec<u8>, Vec<u8>) {
    let mut ch = vec![3, 3];
    ch.extend([7u8; 32]);
    ch.extend([0, 0, 2, 0xc0, 0x2f, 1, 0, 0, 0]);
    let mut m = vec![1, 0, 0, ch.len() as u8];
    m.extend(ch);
    let mut sh = vec![3, 3];
    sh.extend([8u8; 32]);
    sh.extend([0, 0xc0, 0x2f, 0, 0, 0]);
    let mut s = vec![2, 0, 0, sh.len() as u8];
    s.extend(sh);
    s.extend([14, 0, 0, 0]);
    (rec(22, 0x0301, &m), rec(22, 0x0303, &s))
}

/// A connection carrying `segs` (to the server?, bytes), each acknowledged.
fn conn(port: u16, segs: &[(bool, Vec<u8>)]) -> Vec<Vec<u8>> {
    let mut f = vec![
        tcp_v4(C, S, 40000, port, 1000, 0, SYN, &[]),
        tcp_v4(S, C, port, 40000, 9000, 1001, SYN | ACK, &[]),
        tcp_v4(C, S, 40000, port, 1001, 9001, ACK, &[]),
    ];
    let (mut cs, mut ss) = (1001u32, 9001u32);
    for (to_server, d) in segs {
        if *to_server {
            f.push(tcp_v4(C, S, 40000, port, cs, ss, ACK | PSH, d));
            cs += d.len() as u32;
            f.push(tcp_v4(S, C, port, 40000, ss, cs, ACK, &[]));
        } else {
            f.push(tcp_v4(S, C, port, 40000, ss, cs, ACK | PSH, d));
            ss += d.len() as u32;
            f.push(tcp_v4(C, S, 40000, port, cs, ss, ACK, &[]));
        }
    }
    f
}

/// Hellos, then `more`, then a record of data each way.
fn flow(port: u16, more: &[(bool, Vec<u8>)]) -> Vec<Vec<u8>> {
    let (ch, sh) = hellos();
    let app = rec(23, 0x0303, &[0x51; 20]);
    let mut segs = vec![(true, ch), (false, sh)];
    segs.extend_from_slice(more);
    segs.extend([(false, app.clone()), (true, app)]);
    conn(port, &segs)
}

fn ips(rules: &[String]) -> Ips {
    let r: Vec<&str> = rules.iter().map(String::as_str).collect();
    common::ips_with(&r, &[])
}

/// How many alerts each event rule raised, in one batch and one packet per
/// batch (through the store): both must agree.
fn counts(events: &[&str], frames: &[Vec<u8>]) -> Vec<usize> {
    let rules: Vec<String> = events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            format!(
                "alert tls any any -> any any (flow:established; app-layer-event:tls.{e}; \
                 flowint:tls.anomaly.count,+,1; sid:{};)",
                i + 1
            )
        })
        .collect();
    let count = |sids: &[u32]| {
        (1..=events.len() as u32)
            .map(|s| sids.iter().filter(|&&x| x == s).count())
            .collect::<Vec<_>>()
    };
    let (a, _) = common::run_in(&mut ips(&rules), &mut LocalStore::new(), frames, T0);
    let one = count(&a.iter().map(|x| x.0).collect::<Vec<_>>());
    let mut ips = ips(&rules);
    let mut st = LocalStore::new();
    let mut each = Vec::new();
    for (k, f) in frames.iter().enumerate() {
        let (a, _) = common::run_in(
            &mut ips,
            &mut st,
            std::slice::from_ref(f),
            T0 + k as u64 * 1_000_000,
        );
        each.extend(a.into_iter().map(|x| x.0));
    }
    assert_eq!(one, count(&each), "one batch vs one packet per batch");
    one
}

const HB: [&str; 4] = [
    "heartbeat_message",
    "overflow_heartbeat_message",
    "invalid_heartbeat_message",
    "dataleak_heartbeat_mismatch",
];

fn hb(t: u8, plen: u16, payload: usize, pad: usize) -> Vec<u8> {
    let mut b = vec![t];
    b.extend(plen.to_be_bytes());
    b.extend(vec![0x50; payload]);
    b.extend(vec![0; pad]);
    rec(24, 0x0302, &b)
}

#[test]
fn heartbleed_request_is_caught_once_per_direction() {
    let f = flow(
        443,
        &[(true, hb(1, 0x4000, 0, 0)), (false, hb(2, 0x4000, 100, 0))],
    );
    assert_eq!(counts(&HB, &f), [0, 2, 0, 0]);
}

#[test]
fn well_formed_heartbeats_raise_nothing() {
    let f = flow(
        443,
        &[(true, hb(1, 16, 16, 16)), (false, hb(2, 16, 16, 16))],
    );
    assert_eq!(counts(&HB, &f), [0, 0, 0, 0]);
    // Short padding, a bad type, two in flight: invalid.
    let mut f = flow(443, &[(true, hb(1, 16, 16, 8))]);
    f.extend(flow(444, &[(true, hb(3, 16, 16, 16))]));
    f.extend(flow(
        445,
        &[(true, [hb(1, 16, 16, 16), hb(1, 16, 16, 16)].concat())],
    ));
    assert_eq!(counts(&HB, &f), [0, 0, 6, 0]);
}

#[test]
fn encrypted_response_longer_than_its_request_leaks() {
    let ccs = rec(20, 0x0303, &[1]);
    let (_, sh) = hellos();
    let leak = |port, n| {
        let (ch, _) = hellos();
        conn(
            port,
            &[
                (true, ch),
                (false, [sh.clone(), ccs.clone()].concat()),
                (true, [ccs.clone(), rec(24, 0x0303, &[0x45; 40])].concat()),
                (false, rec(24, 0x0303, &vec![0x46; n])),
                (false, rec(23, 0x0303, &[1; 20])),
                (true, rec(23, 0x0303, &[1; 20])),
            ],
        )
    };
    assert_eq!(counts(&HB, &leak(443, 2000)), [0, 0, 0, 2]);
    assert_eq!(counts(&HB, &leak(443, 40)), [0, 0, 0, 0]);
}

#[test]
fn record_events() {
    let ev = [
        "invalid_record_type",
        "invalid_record_length",
        "invalid_ssl_record",
        "invalid_handshake_message",
        "invalid_record_version",
    ];
    let mut f = flow(443, &[(true, rec(25, 0x0303, &[0x58; 10]))]);
    f.extend(flow(444, &[(true, rec(23, 0x0303, &[]))]));
    f.extend(flow(445, &[(false, rec(22, 0x0303, &[2, 0]))]));
    f.extend(flow(446, &[(true, rec(22, 0x0303, &[99, 0, 0, 2, 1, 2]))]));
    f.extend(flow(
        447,
        &[
            (true, rec(23, 0x0305, &[1; 10])),
            (false, rec(23, 0x0200, &[1; 10])),
        ],
    ));
    assert_eq!(counts(&ev, &f), [2, 2, 2, 2, 0]);
}
