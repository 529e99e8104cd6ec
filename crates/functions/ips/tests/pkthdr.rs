//! The packet-header sticky buffers (`tcp.hdr`, `ipv4.hdr`, `ipv6.hdr`,
//! `udp.hdr`, `icmpv4.hdr`, `icmpv6.hdr`) and `icmpv6.mtu`, as Suricata 7
//! evaluates them: per packet, on every packet carrying the header (a SYN
//! too), over the header as it arrived.

use sluice_ips::rules::{parse_rule, RuleSyntax, Vars};
use sluice_ips::Ips;
use sluice_state::LocalStore;
use sluice_wire::build::{icmp_v4_echo, tcp_v4, tcp_v6, udp_v4, udp_v6};
use sluice_wire::tcp::flags::{ACK, PSH, SYN, URG};

mod common;
use common::run_in;

const C: [u8; 4] = [10, 0, 0, 1];
const S: [u8; 4] = [192, 168, 1, 2];
const C6: [u8; 16] = [0xfd, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5];
const S6: [u8; 16] = [0xfd, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7];

fn ips(rules: &[&str]) -> Ips {
    common::ips_with(rules, &[])
}

/// The sids of the alerts `rules` raise over `frames` (one batch, through
/// the reassembler), in order.
fn sids(rules: &[&str], frames: &[Vec<u8>]) -> Vec<u32> {
    run_in(
        &mut ips(rules),
        &mut LocalStore::new(),
        frames,
        1_000_000_000,
    )
    .0
    .iter()
    .map(|a| a.0)
    .collect()
}

fn handshake(dport: u16) -> Vec<Vec<u8>> {
    vec![
        tcp_v4(C, S, 40000, dport, 1000, 0, SYN, &[]),
        tcp_v4(S, C, dport, 40000, 9000, 1001, SYN | ACK, &[]),
        tcp_v4(C, S, 40000, dport, 1001, 9001, ACK, &[]),
    ]
}

/// Recomputes a frame's IPv4 header and transport checksums after an edit.
fn fix(frame: &mut [u8]) {
    let hl = (frame[14] & 0x0f) as usize * 4;
    frame[24..26].fill(0);
    let c = sluice_wire::checksum::checksum(&frame[14..14 + hl]);
    frame[24..26].copy_from_slice(&c.to_be_bytes());
    sluice_wire::rewrite::fill_l4_checksum(frame);
}

#[test]
fn tcp_hdr_matches_packets_without_payload() {
    // Each packet of a handshake; none has a payload.
    let syn_ack =
        "alert tcp any any -> any any (tcp.hdr; content:\"|12|\"; offset:13; depth:1; sid:1;)";
    let every = "alert tcp any any -> any any (tcp.hdr; bsize:20; sid:2;)";
    let port = "alert tcp any any -> any 80 (tcp.hdr; byte_test:2,=,80,2; sid:3;)";
    assert_eq!(
        sids(&[syn_ack, every, port], &handshake(80)),
        vec![2, 3, 1, 2, 2, 3]
    );
}

#[test]
fn tcp_hdr_is_not_the_payload() {
    let mut frames = handshake(80);
    frames.push(tcp_v4(
        C,
        S,
        40000,
        80,
        1001,
        9001,
        PSH | ACK,
        b"GET / HTTP/1.0\r\n",
    ));
    let r = "alert tcp any any -> any any (tcp.hdr; content:\"GET\"; sid:1;)";
    assert!(sids(&[r], &frames).is_empty());
    // A negated content matches every TCP header, never a UDP packet's.
    let neg = "alert ip any any -> any any (tcp.hdr; content:!\"GET\"; sid:2;)";
    frames.push(udp_v4(C, S, 5000, 53, b"x"));
    assert_eq!(sids(&[neg], &frames), vec![2; 4]);
}

#[test]
fn a_header_buffer_makes_a_tcp_rule_inspect_packets_not_the_stream() {
    // Suricata's tcp.hdr sets SIG_FLAG_REQUIRE_PACKET: the payload content
    // must lie in one segment, as with dsize.
    let mut frames = handshake(80);
    frames.push(tcp_v4(C, S, 40000, 80, 1001, 9001, PSH | ACK, b"xx SPL"));
    frames.push(tcp_v4(C, S, 40000, 80, 1007, 9001, PSH | ACK, b"IT yy"));
    frames.push(tcp_v4(C, S, 40000, 80, 1012, 9001, PSH | ACK, b"a SPLIT b"));
    let r = "alert tcp any any -> any 80 (tcp.hdr; content:\"|18|\"; offset:13; depth:1; pkt_data; content:\"SPLIT\"; sid:1;)";
    let stream = "alert tcp any any -> any 80 (content:\"SPLIT\"; sid:2;)";
    let (a, _) = run_in(
        &mut ips(&[r, stream]),
        &mut LocalStore::new(),
        &frames,
        1_000_000_000,
    );
    let got: Vec<u32> = a.iter().map(|x| x.0).collect();
    // The stream rule matches across the cut; the header rule only the
    // whole copy.
    assert_eq!(got.iter().filter(|&&s| s == 1).count(), 1);
    assert!(got.contains(&2));
    // flow:only_stream asks for the stream: refused.
    let only = "alert tcp any any -> any 80 (flow:only_stream; tcp.hdr; content:\"|18|\"; pkt_data; content:\"x\"; sid:3;)";
    assert!(matches!(
        parse_rule(only, &Vars::new()),
        Err(RuleSyntax::PacketPayload(k)) if k == "tcp.hdr"
    ));
}

#[test]
fn tcp_hdr_reads_the_segment_as_it_arrived() {
    // The reassembler clears URG and the urgent pointer; the rule sees them.
    let mut frames = handshake(80);
    let mut urg = tcp_v4(C, S, 40000, 80, 1001, 9001, URG | PSH | ACK, b"urgent");
    urg[34 + 18..34 + 20].copy_from_slice(&42u16.to_be_bytes());
    fix(&mut urg);
    frames.push(urg);
    let r = "alert tcp any any -> any 80 (tcp.hdr; content:\"|38|\"; offset:13; depth:1; byte_test:2,=,42,18; sid:1;)";
    assert_eq!(sids(&[r], &frames), vec![1]);
}

#[test]
fn ipv4_hdr_reads_the_ttl_and_options_as_they_arrived() {
    // A TTL the reassembler raises (to 8) and IP options it overwrites
    // with NOPs.
    let mut low = tcp_v4(C, S, 40000, 81, 5, 6, PSH | ACK, b"low");
    low[22] = 3;
    fix(&mut low);
    let ttl =
        "alert ip any any -> any any (ipv4.hdr; content:\"|03 06|\"; offset:8; depth:2; sid:1;)";
    assert_eq!(sids(&[ttl], &[low]), vec![1]);

    // The same segment with a 4-byte option (router alert, 94 04 00 00).
    let plain = tcp_v4(C, S, 40000, 81, 5, 6, PSH | ACK, b"opts");
    let mut opt = plain[..34].to_vec();
    opt.extend_from_slice(&[0x94, 0x04, 0, 0]);
    opt.extend_from_slice(&plain[34..]);
    opt[14] = 0x46;
    let total = (opt.len() - 14) as u16;
    opt[16..18].copy_from_slice(&total.to_be_bytes());
    fix(&mut opt);
    let r = "alert tcp any any -> any any (ipv4.hdr; bsize:24; content:\"|94 04|\"; offset:20; depth:2; sid:2;)";
    assert_eq!(sids(&[r], &[opt]), vec![2]);
}

#[test]
fn ipv6_hdr_and_transport_headers_over_ipv6() {
    let frames = vec![
        tcp_v6(C6, S6, 40000, 80, 1000, 0, SYN, &[]),
        udp_v6(C6, S6, 5000, 53, b"q"),
        udp_v4(C, S, 5000, 53, b"q"),
    ];
    let v6 = "alert ip any any -> any any (ipv6.hdr; bsize:40; content:\"|fd 00 00 02|\"; offset:24; depth:4; sid:1;)";
    let v4 = "alert ip any any -> any any (ipv4.hdr; content:!\"|00|\"; offset:100; sid:2;)";
    let udp =
        "alert udp any any -> any any (udp.hdr; content:\"|00 35|\"; offset:2; depth:2; sid:3;)";
    assert_eq!(sids(&[v6, v4, udp], &frames), vec![1, 1, 3, 2, 3]);
}

#[test]
fn icmpv4_hdr_and_transforms() {
    let frames = vec![
        icmp_v4_echo(C, S, true, 0x4142, 1),
        udp_v4(C, S, 5000, 53, b"x"),
    ];
    // Echo request (type 8) with identifier "AB", lower-cased.
    let r = "alert icmp any any -> any any (icmpv4.hdr; bsize:8; to_lowercase; content:\"ab\"; offset:4; depth:2; sid:1;)";
    assert_eq!(sids(&[r], &frames), vec![1]);
}

#[test]
fn header_buffers_are_refused_where_suricata_refuses_them() {
    let p = |o: &str| parse_rule(&format!("alert {o} sid:1;)"), &Vars::new());
    // A transport's header on a protocol without it.
    for bad in [
        "udp any any -> any any (tcp.hdr; content:\"a\";",
        "tcp any any -> any any (udp.hdr; content:\"a\";",
        "udp any any -> any any (icmpv4.hdr; content:\"a\";",
        "icmpv4 any any -> any any (icmpv6.hdr; content:\"a\";",
        "icmpv6 any any -> any any (icmpv4.hdr; content:\"a\";",
    ] {
        assert!(
            matches!(p(bad), Err(RuleSyntax::BadValue { .. })),
            "{bad}: {:?}",
            p(bad)
        );
    }
    // A buffer no keyword inspects.
    assert_eq!(
        p("tcp any any -> any any (tcp.hdr;"),
        Err(RuleSyntax::EmptyBuffer("tcp.hdr".into()))
    );
    assert!(p("tcp any any -> any any (ipv4.hdr; pkt_data; content:\"a\";").is_err());
    // Named twice, one list.
    let r = p("ip any any -> any any (ipv4.hdr; content:\"a\"; ipv4.hdr; content:\"b\";").unwrap();
    assert_eq!(r.hdr.len(), 1);
    assert_eq!(r.hdr[0].items.len(), 2);
    // No value.
    assert!(p("tcp any any -> any any (tcp.hdr:x; content:\"a\";").is_err());
    // Application-layer rules: not modelled.
    assert!(
        p("http any any -> any any (tcp.hdr; content:\"a\";").is_err_and(|e| e.is_unsupported())
    );
    assert!(
        p("tcp any any -> any any (tcp.hdr; content:\"a\"; http.uri; content:\"b\";")
            .is_err_and(|e| e.is_unsupported())
    );
    // icmpv6.mtu takes Suricata's integer syntax.
    assert!(p("icmp any any -> any any (icmpv6.mtu:abc;").is_err());
    assert!(p("icmp any any -> any any (icmpv6.mtu:1280<>1500;").is_ok());
}
