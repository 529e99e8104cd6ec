//! `decode-event` through a chain, as Suricata 7 raises decoder events: on
//! the packets the chain's parse accepts (IPv4 options, IPv6 extension
//! headers, TCP options, ICMP types and codes, VLAN stacks), and on the
//! frames it refuses, which the IPS inspects for their event and which
//! stay dropped whatever the rule's action.

use sluice_chain::{Chain, Sharing, StreamStage};
use sluice_ips::rules::{parse_rule, RuleSyntax, Vars};
use sluice_ips::Ips;
use sluice_nf::{AlertAction, Event, NetworkFunction, StoreError, Streams};
use sluice_packet::{Batch, PacketPool, Verdict};
use sluice_reassembly::Reassembler;
use sluice_state::{LocalStore, StateStore};
use sluice_wire::build::udp_v4;
use sluice_wire::FlowKey;

mod common;

const C: [u8; 4] = [10, 0, 0, 1];
const S: [u8; 4] = [192, 168, 1, 2];

/// The reassembler as the chain's stream stage.
struct Stage(Reassembler);

impl StreamStage for Stage {
    fn process(
        &mut self,
        batch: &mut Batch,
        store: &mut dyn StateStore,
        streams: &mut Streams,
        stage: u8,
    ) -> Result<(), StoreError> {
        self.0
            .process(batch, store, streams, stage)
            .map_err(Into::into)
    }

    fn on_timers(&mut self, now_ns: u64, store: &mut dyn StateStore) -> Result<(), StoreError> {
        self.0
            .on_timers(now_ns, store)
            .map(|_| ())
            .map_err(Into::into)
    }

    fn finish(&mut self, batch: &mut Batch, store: &mut dyn StateStore) -> Result<(), StoreError> {
        self.0.finish(batch, store).map_err(Into::into)
    }
}

fn chain_of(ips: Ips) -> Chain {
    Chain::new(
        "t",
        vec![Box::new(ips)],
        Some(Box::new(|ns: sluice_state::Namespace| {
            Box::new(Stage(Reassembler::new(ns, Default::default()))) as Box<dyn StreamStage>
        })),
        Sharing::Shared,
        1000,
    )
}

/// One alert: sid, action, flow.
type Seen = (u32, AlertAction, FlowKey);

/// Runs `frames` as one batch through a chain of an IPS of `rules`;
/// returns the alerts and which frames were dropped.
fn run(rules: &[&str], frames: &[Vec<u8>]) -> (Vec<Seen>, Vec<bool>) {
    let mut chain = chain_of(common::ips_with(rules, &[]));
    let mut store = LocalStore::new();
    let mut pool = PacketPool::new(64);
    let mut b = Batch::with_capacity(frames.len());
    for (k, f) in frames.iter().enumerate() {
        b.push_frame(&mut pool, f, 1_000_000_000 + k as u64 * 1000, 0);
    }
    chain.process(&mut b, &mut store);
    let dropped = b
        .pkts
        .iter()
        .map(|p| p.verdict != Verdict::Forward)
        .collect();
    let alerts = chain
        .take_events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Alert(a) => Some((a.sid, a.action, a.flow)),
            Event::Flow(_) => None,
        })
        .collect();
    (alerts, dropped)
}

fn sids(alerts: &[Seen]) -> Vec<u32> {
    alerts.iter().map(|a| a.0).collect()
}

/// Recomputes the IPv4 header checksum of an Ethernet frame.
fn fix_ip(f: &mut [u8]) {
    let hl = (f[14] & 0x0f) as usize * 4;
    f[24..26].fill(0);
    let c = sluice_wire::checksum::checksum(&f[14..14 + hl]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
}

/// A UDP datagram from C to S with IPv4 options `opts` (a multiple of 4
/// bytes), header checksum valid.
fn udp_with_options(opts: &[u8]) -> Vec<u8> {
    let plain = udp_v4(C, S, 40000, 53, b"abcd");
    let mut f = plain[..34].to_vec();
    f.extend_from_slice(opts);
    f.extend_from_slice(&plain[34..]);
    f[14] = 0x45 + (opts.len() / 4) as u8;
    let total = (f.len() - 14) as u16;
    f[16..18].copy_from_slice(&total.to_be_bytes());
    fix_ip(&mut f);
    f
}

/// A TCP segment from C to S on port 80 whose data offset claims 60
/// bytes of a 20-byte header: the parse refuses it.
fn tcp_hlen_too_small() -> Vec<u8> {
    let mut f = sluice_wire::build::tcp_v4(C, S, 40000, 80, 1, 0, 0x02, &[]);
    f[14 + 20 + 12] = 0xf0;
    f
}

const OPT_INVALID: &str =
    "alert pkthdr any any -> any any (msg:\"opt\"; decode-event:ipv4.opt_invalid; sid:1;)";
const HLEN: &str =
    "alert pkthdr any any -> any any (msg:\"hlen\"; decode-event:tcp.hlen_too_small; sid:2;)";

#[test]
fn an_event_of_a_packet_the_parse_accepts() {
    // An unknown option type (0x99), then padding: 8 bytes of options.
    let odd = udp_with_options(&[0x99, 4, 0, 0, 1, 1, 1, 0]);
    let plain = udp_with_options(&[0x94, 4, 0, 0, 1, 1, 1, 0]);
    let dup = "alert pkthdr any any -> any any (decode-event:ipv4.opt_duplicate; sid:3;)";
    let (alerts, dropped) = run(&[OPT_INVALID, dup], &[odd.clone(), plain]);
    assert_eq!(sids(&alerts), [1]);
    assert_eq!(dropped, [false, false]);
    // Its flow is the packet's.
    assert_eq!(alerts[0].2.dst_port, 53);
    // The same through the plain harness (no chain).
    let mut ips = common::ips_with(&[OPT_INVALID], &[]);
    let (a, _) = common::run_in(&mut ips, &mut LocalStore::new(), &[odd], 1_000_000);
    assert_eq!(a.iter().map(|a| a.0).collect::<Vec<_>>(), [1]);
}

#[test]
fn a_drop_rule_on_an_event_drops_the_packet() {
    let rule = "drop ip any any -> any any (decode-event:ipv4.opt_pad_required; sid:4;)";
    let four = udp_with_options(&[0x94, 4, 0, 0]);
    let eight = udp_with_options(&[0x94, 4, 0, 0, 1, 1, 1, 0]);
    let (alerts, dropped) = run(&[rule], &[eight, four]);
    assert_eq!(sids(&alerts), [4]);
    assert_eq!(alerts[0].1, AlertAction::Blocked);
    assert_eq!(dropped, [false, true]);
}

#[test]
fn a_malformed_frame_raises_its_event_and_stays_dropped() {
    let ok = udp_v4(C, S, 40000, 53, b"abcd");
    let (alerts, dropped) = run(&[HLEN, OPT_INVALID], &[ok, tcp_hlen_too_small()]);
    assert_eq!(sids(&alerts), [2]);
    assert_eq!(alerts[0].1, AlertAction::Allowed);
    assert_eq!(dropped, [false, true]);
    // The alert names the flow the frame's IP header does; its TCP header
    // did not decode, so no ports (as in Suricata).
    let f = alerts[0].2;
    assert_eq!(
        (f.src, f.dst, f.proto, f.src_port, f.dst_port),
        (
            sluice_wire::flow::IpAddr::V4(C),
            sluice_wire::flow::IpAddr::V4(S),
            6,
            0,
            0
        )
    );
}

#[test]
fn a_batch_of_malformed_frames_only_is_inspected() {
    let (alerts, dropped) = run(&[HLEN], &[tcp_hlen_too_small(), tcp_hlen_too_small()]);
    assert_eq!(sids(&alerts), [2, 2]);
    assert_eq!(dropped, [true, true]);
}

#[test]
fn rule_headers_on_malformed_frames() {
    // The IPv4 header decoded, the TCP header did not: the rule's
    // protocol and addresses are checked, its ports see none (Suricata
    // 7.0.10 matches `tcp any any -> any any`, not `-> any 80`).
    let tcp_any = "alert tcp any any -> any any (decode-event:tcp.hlen_too_small; sid:5;)";
    let port80 = "alert tcp any any -> any 80 (decode-event:tcp.hlen_too_small; sid:6;)";
    let other = "alert ip 1.2.3.4 any -> any any (decode-event:tcp.hlen_too_small; sid:13;)";
    let udp = "alert udp any any -> any any (decode-event:tcp.hlen_too_small; sid:14;)";
    // A rule without decode-event never sees a frame the parse refused.
    let any = "alert ip any any -> any any (msg:\"any\"; sid:7;)";
    // A drop rule's frame is dropped anyway: its alert says blocked.
    let drop = "drop pkthdr any any -> any any (decode-event:tcp.hlen_too_small; sid:8;)";
    let (alerts, dropped) = run(
        &[tcp_any, port80, other, udp, any, drop],
        &[tcp_hlen_too_small()],
    );
    assert_eq!(sids(&alerts), [5, 8]);
    assert_eq!(alerts[1].1, AlertAction::Blocked);
    assert_eq!(dropped, [true]);
}

#[test]
fn without_an_ip_header_addresses_are_not_checked() {
    // An IPv4 header length under 20: no IP header decoded, so an `ip`
    // rule's addresses are not checked and a transport's rule does not
    // match (Suricata 7.0.10).
    let mut f = udp_v4(C, S, 40000, 53, b"abcd");
    f[14] = 0x44;
    fix_ip(&mut f);
    let other = "alert ip 1.2.3.4 any -> any any (decode-event:ipv4.hlen_too_small; sid:15;)";
    let udp = "alert udp any any -> any any (decode-event:ipv4.hlen_too_small; sid:16;)";
    let (alerts, dropped) = run(&[other, udp], &[f]);
    assert_eq!(sids(&alerts), [15]);
    assert_eq!(dropped, [true]);
}

#[test]
fn icmpv6_inside_ipv4_is_refused_and_alerted() {
    // Protocol 58 in an IPv4 header: the parse refuses it.
    let mut f = udp_v4(C, S, 40000, 53, b"abcd");
    f[14 + 9] = 58;
    fix_ip(&mut f);
    let rule = "alert pkthdr any any -> any any (decode-event:ipv4.icmpv6; sid:9;)";
    let (alerts, dropped) = run(&[rule], &[f]);
    assert_eq!(sids(&alerts), [9]);
    assert_eq!(dropped, [true]);
}

#[test]
fn four_vlan_tags_are_too_many() {
    let plain = udp_v4(C, S, 40000, 53, b"abcd");
    let tagged = |n: usize| {
        let mut f = plain[..12].to_vec();
        for _ in 0..n {
            f.extend_from_slice(&[0x81, 0x00, 0, 7]);
        }
        f.extend_from_slice(&plain[12..]);
        f
    };
    let rule = "alert pkthdr any any -> any any (decode-event:vlan.too_many_layers; sid:10;)";
    let (alerts, dropped) = run(&[rule], &[tagged(3), tagged(4)]);
    assert_eq!(sids(&alerts), [10]);
    assert_eq!(dropped, [false, false]);
}

#[test]
fn names_as_suricata_reads_them() {
    let p = |o: &str| {
        parse_rule(
            &format!("alert pkthdr any any -> any any ({o} sid:1;)"),
            &Vars::new(),
        )
    };
    let r = p("decode-event:IPV4.Opt_Invalid;").unwrap();
    assert_eq!(r.decode_event.len(), 1);
    assert!(p("decode-event:too_many_layers;").is_ok());
    // Events of layers never received load, and never match.
    assert!(p("decode-event:ppp.wrong_type;").is_ok());
    for bad in [
        "ipv4.no_such_event",
        "decoder.ipv4.trunc_pkt",
        "stream.pkt_retransmission",
        "ipv4",
        "\"ipv4.trunc_pkt\"",
    ] {
        assert!(
            matches!(
                p(&format!("decode-event:{bad};")),
                Err(RuleSyntax::BadValue { .. })
            ),
            "{bad}"
        );
    }
    assert!(matches!(
        p("decode-event;"),
        Err(RuleSyntax::MissingValue { .. })
    ));
    // Rules of layers never received raise nothing on any frame here.
    let ppp = "alert pkthdr any any -> any any (decode-event:ppp.wrong_type; sid:11;)";
    let (alerts, _) = run(&[ppp], &[tcp_hlen_too_small(), udp_v4(C, S, 1, 2, b"")]);
    assert!(alerts.is_empty());
}

#[test]
fn without_decode_event_rules_malformed_frames_are_not_inspected() {
    let ips = common::ips_with(&["alert ip any any -> any any (sid:12;)"], &[]);
    assert!(!ips.sees_malformed());
    let (alerts, dropped) = run(
        &["alert ip any any -> any any (sid:12;)"],
        &[tcp_hlen_too_small()],
    );
    assert!(alerts.is_empty());
    assert_eq!(dropped, [true]);
    assert!(common::ips_with(&[HLEN], &[]).sees_malformed());
}
