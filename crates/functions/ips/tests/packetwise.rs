//! Packetwise rules over TCP: a rule with `dsize` or `flow:no_stream`
//! (`tcp-pkt`) inspects each segment's own payload, never the reassembled
//! stream, as Suricata does (its `dsize` and `no_stream` make a signature
//! need the packet; `flow:only_stream` matches only the stream, and
//! `flow:stateless` asks nothing of the packet).

use sluice_ips::rules::{self, Vars};
use sluice_ips::Ips;
use sluice_state::LocalStore;
use sluice_wire::build::tcp_v4;
use sluice_wire::tcp::flags::{ACK, PSH, SYN};

mod common;
use common::{run_each, run_in};

const C: [u8; 4] = [10, 0, 0, 1];
const S: [u8; 4] = [192, 168, 1, 2];

fn ips(rules: &[&str]) -> Ips {
    common::ips_with(rules, &[])
}

fn handshake() -> Vec<Vec<u8>> {
    vec![
        tcp_v4(C, S, 40000, 80, 1000, 0, SYN, &[]),
        tcp_v4(S, C, 80, 40000, 9000, 1001, SYN | ACK, &[]),
        tcp_v4(C, S, 40000, 80, 1001, 9001, ACK, &[]),
    ]
}

/// The handshake, then the client's `segments` in order.
fn client(segments: &[&[u8]]) -> Vec<Vec<u8>> {
    let mut f = handshake();
    let mut seq = 1001;
    for s in segments {
        f.push(tcp_v4(C, S, 40000, 80, seq, 9001, ACK | PSH, s));
        seq += s.len() as u32;
    }
    f
}

/// The sids alerted on `frames`, run as one batch, sorted (stream rules
/// fire before packetwise ones on a packet; the order is not the point).
fn sids(rules: &[&str], frames: &[Vec<u8>]) -> Vec<u32> {
    let mut i = ips(rules);
    let (a, _) = run_in(&mut i, &mut LocalStore::new(), frames, 1_000_000_000);
    let mut s: Vec<u32> = a.iter().map(|a| a.0).collect();
    s.sort_unstable();
    s
}

const DSIZE: &str =
    "alert tcp any any -> any 80 (flow:established,to_server; dsize:5; content:\"hello\"; sid:1;)";
const STREAM: &str = "alert tcp any any -> any 80 (content:\"hello\"; sid:2;)";

#[test]
fn dsize_compares_each_segments_payload_length() {
    assert_eq!(sids(&[DSIZE], &client(&[b"hello"])), vec![1]);
    // The same content in a segment of another size.
    assert!(sids(&[DSIZE], &client(&[b"hello world"])).is_empty());
    assert!(sids(&[DSIZE], &client(&[b"hell"])).is_empty());
    // Each segment on its own: the second one is five bytes of "hello".
    assert_eq!(sids(&[DSIZE], &client(&[b"say: ", b"hello"])), vec![1]);
    // Every segment that matches alerts.
    assert_eq!(sids(&[DSIZE], &client(&[b"hello", b"hello"])), vec![1, 1]);
}

#[test]
fn content_split_across_segments_matches_only_stream_rules() {
    let split = client(&[b"xxhel", b"lo"]);
    assert!(sids(&[DSIZE], &split).is_empty());
    let pkt = "alert tcp any any -> any 80 (dsize:<10; content:\"hello\"; sid:3;)";
    assert!(sids(&[pkt], &split).is_empty());
    assert_eq!(sids(&[STREAM], &split), vec![2]);
    assert_eq!(sids(&[pkt, STREAM], &split), vec![2]);
    // Whole in a segment: both.
    assert_eq!(sids(&[pkt, STREAM], &client(&[b"hello"])), vec![2, 3]);
    // Split across batches too (the state between them in the store).
    let (a, _, _) = run_each(ips(&[pkt, STREAM]), &split);
    assert_eq!(a, vec![2]);
}

#[test]
fn no_stream_and_only_stream() {
    let no = "alert tcp any any -> any 80 (flow:no_stream; content:\"abc\"; sid:10;)";
    let pkt = "alert tcp-pkt any any -> any 80 (content:\"abc\"; sid:11;)";
    let only = "alert tcp any any -> any 80 (flow:only_stream; content:\"abc\"; sid:12;)";
    let rules = [no, pkt, only];
    assert_eq!(sids(&rules, &client(&[b"xabcx"])), vec![10, 11, 12]);
    assert_eq!(sids(&rules, &client(&[b"xa", b"bcx"])), vec![12]);
    // A segment outside a tracked stream (no handshake seen): packets only.
    let lone = tcp_v4(C, S, 41000, 80, 5, 5, ACK, b"abc");
    assert_eq!(sids(&rules, &[lone]), vec![10, 11]);
}

#[test]
fn stateless_content_rules_are_stream_rules() {
    let r = "alert tcp any any -> any 80 (flow:stateless; content:\"hello\"; sid:4;)";
    assert_eq!(sids(&[r], &client(&[b"xxhel", b"lo"])), vec![4]);
}

#[test]
fn positions_count_from_the_segments_payload() {
    // The PPTP rule's shape from ET Open: contents at fixed offsets.
    let pkt = "alert tcp any any -> any 80 (flow:no_stream; content:\"|00 01|\"; offset:2; depth:4; content:\"|00 02|\"; offset:8; depth:10; sid:5;)";
    let stream = "alert tcp any any -> any 80 (content:\"|00 01|\"; offset:2; depth:4; content:\"|00 02|\"; offset:8; depth:10; sid:6;)";
    let msg: &[u8] = b"ab\x00\x01cdefgh\x00\x02";
    // Second segment: offsets count from its own start for sid 5; sid 6,
    // a stream rule, is matched on the stream (no match at stream offset
    // 16) and, having offset and depth, on the segment's own payload too
    // (Suricata's packet-and-stream rules), where it matches.
    let frames = client(&[b"0123456789abcdef", msg]);
    assert_eq!(sids(&[pkt, stream], &frames), vec![5, 6]);
    let only = "alert tcp any any -> any 80 (flow:only_stream; content:\"|00 01|\"; offset:2; depth:4; content:\"|00 02|\"; offset:8; depth:10; sid:6;)";
    assert_eq!(sids(&[pkt, only], &frames), vec![5]);
    assert_eq!(sids(&[pkt, stream], &client(&[msg])), vec![5, 6]);
    // Relative contents backtrack within the payload.
    let rel =
        "alert tcp any any -> any 80 (dsize:>0; content:\"a\"; content:\"b\"; within:1; sid:7;)";
    assert_eq!(sids(&[rel], &client(&[b"a-a-ab"])), vec![7]);
    assert!(sids(&[rel], &client(&[b"a-a-a", b"b"])).is_empty());
}

#[test]
fn packetwise_rules_without_content() {
    let r = "alert tcp any any -> any 80 (dsize:>3; pcre:\"/^ab+c/\"; sid:8;)";
    assert_eq!(sids(&[r], &client(&[b"abbbc"])), vec![8]);
    // Anchored at the second segment's own start.
    assert_eq!(sids(&[r], &client(&[b"zzzz", b"abcd"])), vec![8]);
    assert!(sids(&[r], &client(&[b"ab", b"bbc"])).is_empty());
    // Out of a stream too.
    let lone = tcp_v4(C, S, 41000, 80, 5, 5, ACK, b"abbc");
    assert_eq!(sids(&[r], &[lone]), vec![8]);
}

#[test]
fn out_of_order_and_resent_segments_are_inspected_as_they_come() {
    let mut f = handshake();
    // Second segment first: held out of order, its payload still inspected.
    f.push(tcp_v4(C, S, 40000, 80, 1006, 9001, ACK | PSH, b"hello"));
    f.push(tcp_v4(C, S, 40000, 80, 1001, 9001, ACK | PSH, b"hello"));
    // A retransmission of the first.
    f.push(tcp_v4(C, S, 40000, 80, 1001, 9001, ACK | PSH, b"hello"));
    assert_eq!(sids(&[DSIZE], &f), vec![1, 1, 1]);
    // The stream rule sees the stream: "hellohello" once released, each
    // occurrence in the bytes the second packet delivered, once per packet.
    assert_eq!(sids(&[STREAM], &f), vec![2]);
    // A segment overlapping bytes already delivered: its new stream bytes
    // are only its tail, its payload is inspected whole.
    let mut f = handshake();
    f.push(tcp_v4(C, S, 40000, 80, 1001, 9001, ACK | PSH, b"hel"));
    f.push(tcp_v4(C, S, 40000, 80, 1001, 9001, ACK | PSH, b"hello"));
    assert_eq!(sids(&[DSIZE], &f), vec![1]);
    assert_eq!(sids(&[STREAM], &f), vec![2]);
}

#[test]
fn packetwise_rules_share_the_flows_state() {
    let set = "alert tcp any any -> any 80 (content:\"login\"; flowbits:set,in; flowbits:noalert; sid:20;)";
    let check =
        "alert tcp any any -> any 80 (flowbits:isset,in; dsize:<8; content:\"cmd\"; sid:21;)";
    assert!(sids(&[set, check], &client(&[b"cmd"])).is_empty());
    let (a, _, _) = run_each(ips(&[set, check]), &client(&[b"lo", b"gin", b"cmd"]));
    assert_eq!(a, vec![21]);
    let drop = "drop tcp any any -> any 80 (dsize:3; content:\"cmd\"; sid:22;)";
    let (a, d, _) = run_each(ips(&[drop]), &client(&[b"xx", b"cmd", b"ok"]));
    assert_eq!(a, vec![22]);
    assert_eq!(d[3..], [false, true, true]);
}

#[test]
fn dsize_with_only_stream_is_refused() {
    let v = Vars::new();
    for r in [
        "alert tcp any any -> any any (flow:only_stream; dsize:5; content:\"a\"; sid:1;)",
        "alert tcp-stream any any -> any any (dsize:5; content:\"a\"; sid:1;)",
    ] {
        let e = rules::parse_rule(r, &v).unwrap_err();
        assert_eq!(e.reason(), "dsize with flow:only_stream", "{r}");
    }
    for r in [
        "alert tcp any any -> any any (dsize:5; content:\"a\"; sid:1;)",
        "alert tcp any any -> any any (flow:no_stream; content:\"a\"; sid:1;)",
        "alert tcp any any -> any any (flow:stateless; content:\"a\"; sid:1;)",
        "alert ip any any -> any any (dsize:5; content:\"a\"; sid:1;)",
    ] {
        let rule = rules::parse_rule(r, &v).unwrap();
        assert_eq!(rule.packetwise(), !r.contains("stateless"), "{r}");
    }
}
