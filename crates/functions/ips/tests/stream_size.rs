//! `stream_size`: each direction's sequence space as Suricata counts it
//! (detect-stream_size.c: `next_seq - isn`, so 1 for the SYN plus the bytes
//! seen in sequence), read from the reassembler's stream offsets, whose
//! record is in the store.

use sluice_ips::rules::{parse_rule, StreamSide, Vars};
use sluice_ips::Ips;
use sluice_state::LocalStore;
use sluice_wire::build::{tcp_v4, udp_v4};
use sluice_wire::tcp::flags::{ACK, PSH, SYN};

mod common;

const C: [u8; 4] = [10, 0, 0, 1];
const S: [u8; 4] = [192, 168, 1, 2];
const T: u64 = 1_000_000_000;

fn ips(rules: &[&str]) -> Ips {
    common::ips_with(rules, &[])
}

fn sids(ips: &mut Ips, st: &mut LocalStore, frames: &[Vec<u8>], t: u64) -> Vec<u32> {
    common::run_in(ips, st, frames, t)
        .0
        .into_iter()
        .map(|a| a.0)
        .collect()
}

/// Client ISN 1000, server ISN 9000.
fn handshake() -> Vec<Vec<u8>> {
    vec![
        tcp_v4(C, S, 40000, 80, 1000, 0, SYN, &[]),
        tcp_v4(S, C, 80, 40000, 9000, 1001, SYN | ACK, &[]),
        tcp_v4(C, S, 40000, 80, 1001, 9001, ACK, &[]),
    ]
}

fn cli(seq: u32, ack: u32, data: &[u8]) -> Vec<u8> {
    tcp_v4(C, S, 40000, 80, seq, ack, ACK | PSH, data)
}

fn srv(seq: u32, ack: u32, data: &[u8]) -> Vec<u8> {
    tcp_v4(S, C, 80, 40000, seq, ack, ACK | PSH, data)
}

/// The handshake counts 1 per direction (the SYN's sequence number), so
/// `client,=,1` holds on the SYN and the handshake's ACK, not on the data
/// packet (size 1 + 4); the server's direction is 0 before its SYN-ACK.
#[test]
fn the_syn_counts_one() {
    let rules = [
        "alert tcp any any -> any any (msg:\"c1\"; flow:to_server; stream_size:client,=,1; sid:1;)",
        "alert tcp any any -> any any (msg:\"s0\"; flow:to_server; stream_size:server,=,0; sid:2;)",
        "alert tcp any any -> any any (msg:\"c5\"; flow:to_server; stream_size:client,==,5; sid:3;)",
    ];
    let mut frames = handshake();
    frames.push(cli(1001, 9001, b"abcd"));
    let got = sids(&mut ips(&rules), &mut LocalStore::new(), &frames, T);
    assert_eq!(got, vec![1, 2, 1, 3]);
}

/// ET Open's use: a content only while the server has sent (almost)
/// nothing — `stream_size:server,<,5` is "fewer than 4 bytes from the
/// server". The packet's own bytes count for its own direction.
#[test]
fn a_content_while_the_server_said_little() {
    let rules = [
        "alert tcp any any -> any any (flow:established,to_server; stream_size:server,<,5; content:\"cmd\"; sid:1;)",
        "alert tcp any any -> any any (flow:established,to_client; stream_size:server,<,5; content:\"ok\"; sid:2;)",
    ];
    let mut frames = handshake();
    frames.push(cli(1001, 9001, b"cmd 1"));
    frames.push(srv(9001, 1006, b"ok!")); // server size 4: < 5
    frames.push(cli(1006, 9004, b"cmd 2")); // still 4
    frames.push(srv(9004, 1011, b"ok")); // 6 with this packet
    frames.push(cli(1011, 9006, b"cmd 3")); // 6
    let got = sids(&mut ips(&rules), &mut LocalStore::new(), &frames, T);
    assert_eq!(got, vec![1, 2, 1]);
}

/// `both` needs each direction to satisfy the comparison, `either` one;
/// `!=`, `<=`, `>=` as written.
#[test]
fn both_either_and_the_operators() {
    let rules = [
        "alert tcp any any -> any any (flow:to_server; stream_size:both,>,3; content:\"q\"; sid:1;)",
        "alert tcp any any -> any any (flow:to_server; stream_size:either,>,3; content:\"q\"; sid:2;)",
        "alert tcp any any -> any any (flow:to_server; stream_size:server,!=,1; content:\"q\"; sid:3;)",
        "alert tcp any any -> any any (flow:to_server; stream_size:client,<=,4; content:\"q\"; sid:4;)",
        "alert tcp any any -> any any (flow:to_server; stream_size:client,>=,6; content:\"q\"; sid:5;)",
    ];
    let mut frames = handshake();
    frames.push(cli(1001, 9001, b"q1")); // client 3, server 1
    frames.push(srv(9001, 1003, b"xyz")); // server 4
    frames.push(cli(1003, 9004, b"q2")); // client 5, server 4
    frames.push(cli(1005, 9004, b"q")); // client 6
    let got = sids(&mut ips(&rules), &mut LocalStore::new(), &frames, T);
    assert_eq!(got, vec![4, 1, 2, 3, 1, 2, 3, 5]);
}

/// An out-of-order segment adds nothing until the hole is filled (Suricata's
/// `next_seq` stops at a hole); the sizes come from the reassembler's record
/// in the store, so another instance continues them.
#[test]
fn only_bytes_in_sequence_count_and_the_sizes_live_in_the_store() {
    let rules = [
        "alert tcp any any -> any any (flow:to_server; stream_size:client,>,10; content:\"z\"; sid:1;)",
    ];
    let mut st = LocalStore::new();
    let mut frames = handshake();
    frames.push(cli(1001, 9001, b"aaaa")); // 5
    frames.push(cli(1010, 9001, b"zzzz")); // after a hole of 5: still 5
    let got = sids(&mut ips(&rules), &mut st, &frames, T);
    assert!(got.is_empty(), "{got:?}");
    // Another instance: the hole filled delivers both (13 > 10).
    let fill = [cli(1005, 9001, b"bbbbb")];
    let got = sids(&mut ips(&rules), &mut st, &fill, T + 1_000_000);
    assert_eq!(got, vec![1]);
}

/// Not TCP, or TCP outside a tracked stream: never matches (Suricata needs
/// the TCP session).
#[test]
fn only_tracked_tcp_streams_match() {
    let rules = ["alert ip any any -> any any (stream_size:either,>=,0; content:\"x\"; sid:1;)"];
    let frames = [
        udp_v4(C, S, 5000, 53, b"x"),
        // No handshake seen: the reassembler does not take it up.
        cli(5000, 7000, b"x"),
    ];
    let got = sids(&mut ips(&rules), &mut LocalStore::new(), &frames, T);
    assert!(got.is_empty(), "{got:?}");
}

#[test]
fn parsing() {
    let p = |o: &str| {
        parse_rule(
            &format!("alert tcp any any -> any any ({o} sid:1;)"),
            &Vars::new(),
        )
        .map(|r| r.checks.stream_size)
    };
    let z = p("stream_size: server , < , 6 ;").unwrap().unwrap();
    assert_eq!(z.side, StreamSide::Server);
    assert!(z.matches([0, 5]) && !z.matches([0, 6]));
    let z = p("stream_size:either,=,4294967295;").unwrap().unwrap();
    assert!(z.matches([u32::MAX, 0]) && !z.matches([1, 1]));
    for bad in [
        "stream_size:invalidoption,<,6;",
        "stream_size:server,<;",
        "stream_size:server,<>,6;",
        "stream_size:server,<,-1;",
        "stream_size:server,<,4294967296;",
        "stream_size:client,>,6,7;",
    ] {
        assert!(p(bad).is_err(), "{bad}");
    }
}
