use super::*;
use proptest::prelude::*;
use sluice_nf::{testing, Verdict};
use sluice_state::{Codec, Reader, Writer};
use sluice_state::{LocalStore, SharedLocalStore};
use sluice_wire::build;
use sluice_wire::parse::parse_frame;
use sluice_wire::parse::L4;
use sluice_wire::rewrite::verify_all_checksums;
use sluice_wire::tcp::flags::{ACK, FIN, SYN};
use sluice_wire::FlowKey;
use std::collections::HashSet;

const H: [u8; 4] = [10, 0, 0, 5];
const R: [u8; 4] = [198, 51, 100, 9];
const SEC: u64 = 1_000_000_000;

fn cfg() -> Config {
    Config {
        inside: vec!["10.0.0.0/8".into()],
        pool: vec!["203.0.113.0/31".into()],
        ..Default::default()
    }
}

fn nat_with(tweak: impl FnOnce(&mut Config)) -> Nat {
    let mut c = cfg();
    tweak(&mut c);
    build(&c, Namespace(2), std::path::Path::new(".")).unwrap()
}

struct Out {
    v: Vec<Verdict>,
    frames: Vec<Vec<u8>>,
}

impl Out {
    fn reason(&self, i: usize) -> Option<&'static str> {
        match self.v[i] {
            Verdict::Forward => None,
            Verdict::Drop(d) => Some(d.reason),
        }
    }
    fn flow(&self, i: usize) -> FlowKey {
        assert_eq!(self.v[i], Verdict::Forward, "packet {i} dropped");
        parse_frame(&self.frames[i]).unwrap().flow
    }
}

fn run(f: &mut dyn NetworkFunction, store: &mut dyn StateStore, frames: &[(Vec<u8>, u64)]) -> Out {
    let o = testing::run_frames(f, store, frames);
    Out {
        v: o.verdicts,
        frames: o.frames,
    }
}

fn timers(f: &mut dyn NetworkFunction, store: &mut dyn StateStore, now: u64) {
    testing::run_timers(f, store, now);
}

fn counter(f: &dyn NetworkFunction, name: &str) -> u64 {
    testing::counter(f, name)
}

fn v4(a: IpAddr) -> [u8; 4] {
    match a {
        IpAddr::V4(b) => b,
        IpAddr::V6(_) => panic!("v6"),
    }
}

fn pool_addrs() -> [[u8; 4]; 2] {
    [[203, 0, 113, 0], [203, 0, 113, 1]]
}

#[test]
fn tcp_udp_and_echo_round_trips_restore_the_originals() {
    let mut n = nat_with(|_| {});
    let mut s = LocalStore::new();
    for (out_frame, back) in [
        (
            build::tcp_v4(H, R, 40000, 443, 1, 0, SYN, b""),
            Box::new(|pa: [u8; 4], pp: u16| build::tcp_v4(R, pa, 443, pp, 9, 2, SYN | ACK, b""))
                as Box<dyn Fn([u8; 4], u16) -> Vec<u8>>,
        ),
        (
            build::udp_v4(H, R, 5353, 53, b"query"),
            Box::new(|pa, pp| build::udp_v4(R, pa, 53, pp, b"answer")),
        ),
        (
            build::icmp_v4_echo(H, R, true, 777, 1),
            Box::new(|pa, pp| build::icmp_v4_echo(R, pa, false, pp, 1)),
        ),
    ] {
        let orig = parse_frame(&out_frame).unwrap().flow;
        let o = run(&mut n, &mut s, &[(out_frame, SEC)]);
        let t = o.flow(0);
        assert!(verify_all_checksums(&o.frames[0]));
        assert!(pool_addrs().contains(&v4(t.src)));
        assert!(t.src_port >= 1024);
        assert_eq!((t.dst, t.proto), (orig.dst, orig.proto));
        if orig.proto != ip_proto::ICMP {
            assert_eq!(t.dst_port, orig.dst_port);
        } else {
            assert_eq!(t.dst_port, t.src_port, "echo identifier translated");
        }
        let o = run(&mut n, &mut s, &[(back(v4(t.src), t.src_port), 2 * SEC)]);
        assert!(verify_all_checksums(&o.frames[0]));
        assert_eq!(
            o.flow(0),
            orig.reverse(),
            "reply restored to the inside endpoint"
        );
    }
    assert_eq!(counter(&n, "new_mappings"), 3);
    assert_eq!(counter(&n, "translated_in"), 3);
}

#[test]
fn established_flow_costs_one_read_per_batch() {
    let mut n = nat_with(|_| {});
    let mut s = LocalStore::new();
    run(&mut n, &mut s, &[(build::udp_v4(H, R, 5353, 53, b"q"), 0)]);
    let before = s.counters();
    let pkts: Vec<_> = (0..8)
        .map(|_| (build::udp_v4(H, R, 5353, 53, b"q"), 1000))
        .collect();
    let o = run(&mut n, &mut s, &pkts);
    let first = o.flow(0);
    assert!((0..8).all(|i| o.flow(i) == first));
    let d = s.counters().since(&before);
    assert_eq!((d.round_trips, d.reads, d.writes, d.atomics), (1, 1, 0, 0));
}

#[test]
fn unsolicited_inbound_is_dropped() {
    let mut n = nat_with(|_| {});
    let mut s = LocalStore::new();
    let o = run(
        &mut n,
        &mut s,
        &[(build::udp_v4(R, [203, 0, 113, 1], 53, 2000, b"x"), 0)],
    );
    assert_eq!(o.reason(0), Some("no_mapping"));
    // Traffic that is neither inside nor to the pool passes untouched.
    let f = build::udp_v4(R, [192, 0, 2, 1], 53, 2000, b"x");
    let o = run(&mut n, &mut s, &[(f.clone(), 0)]);
    assert_eq!(o.frames[0], f);
    assert_eq!(counter(&n, "no_mapping"), 1);
}

#[test]
fn many_flows_never_share_a_public_endpoint() {
    let mut n = nat_with(|c| c.ports = "2000-2199".into());
    let mut s = LocalStore::new();
    let mut seen = HashSet::new();
    let frames: Vec<_> = (0..400u32)
        .map(|i| {
            (
                build::udp_v4(
                    [10, 1, (i >> 8) as u8, i as u8],
                    R,
                    1000 + (i % 7) as u16,
                    53,
                    b"q",
                ),
                1,
            )
        })
        .collect();
    for chunk in frames.chunks(32) {
        let o = run(&mut n, &mut s, chunk);
        for i in 0..chunk.len() {
            let f = o.flow(i);
            assert!(
                seen.insert((f.src, f.src_port)),
                "{f} reuses a public endpoint"
            );
        }
    }
    assert_eq!(seen.len(), 400);
    // Pool of 2 x 200 = 400 items is now exhausted.
    let o = run(&mut n, &mut s, &[(build::udp_v4(H, R, 1, 53, b"q"), 2)]);
    assert_eq!(o.reason(0), Some("pool_exhausted"));
    assert_eq!(counter(&n, "pool_exhausted"), 1);
}

#[test]
fn concurrent_instances_never_share_a_public_endpoint_and_agree_per_flow() {
    let shared = SharedLocalStore::new();
    let mut inst: Vec<(Nat, SharedLocalStore)> = (0..4)
        .map(|_| (nat_with(|c| c.ports = "3000-3999".into()), shared.handle()))
        .collect();
    // Every flow sends three packets, each to a different instance, in batches mixing flows.
    spread_300_flows(&mut inst, 16);
}

/// 300 UDP flows, three packets each, every packet to a different one of the
/// four instances, in batches of `batch` flows: each flow keeps one mapping on
/// every instance, and no public endpoint is handed out twice.
fn spread_300_flows(inst: &mut [(Nat, SharedLocalStore)], batch: usize) {
    let flows: Vec<_> = (0..300u32)
        .map(|i| ([10, 2, (i >> 8) as u8, i as u8], 4000 + i as u16))
        .collect();
    let mut mapping: std::collections::HashMap<([u8; 4], u16), FlowKey> = Default::default();
    for round in 0..3u64 {
        for (bi, chunk) in flows.chunks(batch).enumerate() {
            let k = (bi + round as usize) % inst.len();
            let frames: Vec<_> = chunk
                .iter()
                .map(|&(a, p)| (build::udp_v4(a, R, p, 53, b"q"), round))
                .collect();
            let (n, s) = &mut inst[k];
            let o = run(n, s, &frames);
            for (j, &(a, p)) in chunk.iter().enumerate() {
                let t = o.flow(j);
                assert_eq!(
                    *mapping.entry((a, p)).or_insert(t),
                    t,
                    "flow keeps its mapping on every instance"
                );
            }
        }
    }
    let publics: HashSet<_> = mapping.values().map(|f| (f.src, f.src_port)).collect();
    assert_eq!(
        publics.len(),
        flows.len(),
        "no public endpoint handed out twice"
    );
}

/// A store that runs `hook` just before its `at`-th execute: lets a test put another
/// instance's whole batch between two round trips of this one.
use sluice_nf::testing::Interleave;

#[test]
fn racing_instances_agree_on_one_mapping_and_the_loser_frees_its_port() {
    let shared = SharedLocalStore::new();
    let syn = build::tcp_v4(H, R, 40000, 80, 1, 0, SYN, b"");
    let other_out = std::rc::Rc::new(std::cell::RefCell::new(None));
    let slot = other_out.clone();
    let mut b_store = shared.handle();
    let syn_b = syn.clone();
    let mut b = nat_with(|c| c.ports = "5000-5002".into());
    let mut store = Interleave {
        inner: shared.handle(),
        calls: 0,
        at: 3,
        hook: Some(Box::new(move || {
            let o = run(&mut b, &mut b_store, &[(syn_b.clone(), 1)]);
            *slot.borrow_mut() = Some((o.flow(0), counter(&b, "new_mappings")));
        })),
    };
    let mut a = nat_with(|c| c.ports = "5000-5002".into());
    let o = run(&mut a, &mut store, &[(syn, 1)]);
    let (b_flow, b_new) = other_out.borrow().unwrap();
    assert_eq!(o.flow(0), b_flow, "the loser adopts the winner's mapping");
    assert_eq!(
        (
            counter(&a, "races_lost"),
            counter(&a, "new_mappings"),
            b_new
        ),
        (1, 0, 1)
    );
    // The loser returned its item: of 6 items one is in use, so 5 more flows fit.
    let mut c = nat_with(|c| c.ports = "5000-5002".into());
    let mut s = shared.handle();
    let frames: Vec<_> = (0..6u16)
        .map(|i| (build::udp_v4(H, R, 100 + i, 53, b""), 2))
        .collect();
    let o = run(&mut c, &mut s, &frames);
    assert_eq!((0..6).filter(|&i| o.reason(i).is_none()).count(), 5);
    assert_eq!(o.reason(5), Some("pool_exhausted"));
}

#[test]
fn ports_are_reused_only_after_expiry() {
    let mut n = nat_with(|c| {
        c.pool = vec!["203.0.113.7".into()];
        c.ports = "6000-6001".into();
        c.timeouts.udp = 30;
    });
    let mut s = LocalStore::new();
    let q = |p: u16, t: u64| (build::udp_v4(H, R, p, 53, b"q"), t);
    let a = run(&mut n, &mut s, &[q(1, 0)]).flow(0).src_port;
    let b = run(&mut n, &mut s, &[q(2, 10 * SEC)]).flow(0).src_port;
    assert_ne!(a, b);
    assert_eq!(
        run(&mut n, &mut s, &[q(3, 20 * SEC)]).reason(0),
        Some("pool_exhausted")
    );
    timers(&mut n, &mut s, 29 * SEC);
    assert_eq!(
        run(&mut n, &mut s, &[q(3, 29 * SEC)]).reason(0),
        Some("pool_exhausted")
    );
    // The first mapping expires at 30 s; its port goes to the new flow.
    timers(&mut n, &mut s, 31 * SEC);
    assert_eq!(counter(&n, "expired"), 1);
    let o = run(&mut n, &mut s, &[q(3, 31 * SEC)]);
    assert_eq!(o.flow(0).src_port, a);
    // The expired flow's reply no longer gets in.
    let back = build::udp_v4(R, [203, 0, 113, 7], 53, b, b"r");
    assert!(
        run(&mut n, &mut s, &[(back, 39 * SEC)]).reason(0).is_none(),
        "second mapping still live"
    );
    timers(&mut n, &mut s, 45 * SEC);
    assert_eq!(counter(&n, "expired"), 1, "refreshed by its reply at 39 s");
}

#[test]
fn tcp_timeouts_follow_fin_and_rst() {
    let mut n = nat_with(|c| {
        c.timeouts.tcp_established = 1000;
        c.timeouts.tcp_transitory = 100;
    });
    let mut s = LocalStore::new();
    let o = run(
        &mut n,
        &mut s,
        &[
            (build::tcp_v4(H, R, 1, 80, 1, 0, SYN, b""), 0),
            (build::tcp_v4(H, R, 2, 80, 1, 0, SYN, b""), 0),
        ],
    );
    let (p1, p2) = (o.flow(0), o.flow(1));
    let pa = v4(p1.src);
    // Flow 1 closes with FINs both ways; flow 2 stays open.
    run(
        &mut n,
        &mut s,
        &[(build::tcp_v4(H, R, 1, 80, 5, 5, FIN | ACK, b""), SEC)],
    );
    run(
        &mut n,
        &mut s,
        &[(
            build::tcp_v4(R, pa, 80, p1.src_port, 5, 6, FIN | ACK, b""),
            2 * SEC,
        )],
    );
    let back1 = (
        build::tcp_v4(R, pa, 80, p1.src_port, 6, 6, ACK, b""),
        150 * SEC,
    );
    let back2 = (
        build::tcp_v4(R, v4(p2.src), 80, p2.src_port, 6, 6, ACK, b""),
        150 * SEC,
    );
    let o = run(&mut n, &mut s, &[back1, back2]);
    assert_eq!(
        o.reason(0),
        Some("no_mapping"),
        "closed flow used the transitory timeout"
    );
    assert!(o.reason(1).is_none());
}

/// ICMP errors in the batch that opens their flow's mapping find it, as they
/// would one batch later; an error before the packet that opens it does not.
#[test]
fn icmp_errors_find_a_mapping_opened_earlier_in_their_batch() {
    let query = build::udp_v4(H, R, 5353, 53, b"query");
    // The public endpoint the first mapping gets (allocation is deterministic).
    let mut probe = nat_with(|_| {});
    let t = run(&mut probe, &mut LocalStore::new(), &[(query.clone(), 0)]).flow(0);
    // From inside, about the reply flow; to the public address, about the
    // translated datagram.
    let inbound = build::udp_v4(R, H, 53, 5353, b"reply");
    let out_err = build::icmp_v4_error(H, R, 3, 3, &inbound[14..]);
    let translated = build::udp_v4(v4(t.src), R, t.src_port, 53, b"query");
    let in_err = build::icmp_v4_error([192, 0, 2, 254], v4(t.src), 3, 3, &translated[14..]);
    for (err, outer) in [(&out_err, t.src), (&in_err, IpAddr::V4(H))] {
        let mut n = nat_with(|_| {});
        let mut s = LocalStore::new();
        let o = run(&mut n, &mut s, &[(query.clone(), 0), (err.clone(), 1000)]);
        assert_eq!(o.flow(0), t);
        assert!(o.reason(1).is_none(), "error dropped: {:?}", o.reason(1));
        assert!(verify_all_checksums(&o.frames[1]));
        let m = parse_frame(&o.frames[1]).unwrap();
        assert!(m.flow.src == outer || m.flow.dst == outer, "{:?}", m.flow);
        assert_eq!(counter(&n, "icmp_errors_translated"), 1);
    }
    // Before the packet that opens the mapping there is none to translate with.
    let mut n = nat_with(|_| {});
    let o = run(
        &mut n,
        &mut LocalStore::new(),
        &[(out_err.clone(), 0), (query.clone(), 1000)],
    );
    assert_eq!(o.reason(0), Some("no_mapping"));
    assert_eq!(o.flow(1), t);
}

#[test]
fn icmp_errors_are_translated_both_ways() {
    let mut n = nat_with(|_| {});
    let mut s = LocalStore::new();
    let o = run(
        &mut n,
        &mut s,
        &[(build::udp_v4(H, R, 5353, 53, b"query"), 0)],
    );
    let t = o.flow(0);
    // A router answers the translated datagram with port unreachable.
    let err = build::icmp_v4_error([192, 0, 2, 254], v4(t.src), 3, 3, &o.frames[0][14..]);
    let o = run(&mut n, &mut s, &[(err, SEC)]);
    assert!(verify_all_checksums(&o.frames[0]));
    let m = parse_frame(&o.frames[0]).unwrap();
    assert_eq!(m.flow.dst, IpAddr::V4(H));
    let e = m.icmp_embedded.unwrap();
    assert_eq!((e.flow.src, e.flow.src_port), (IpAddr::V4(H), 5353));
    // The inside host answers a (translated) inbound reply with an error of its own.
    let inbound = build::udp_v4(R, H, 53, 5353, b"late");
    let err = build::icmp_v4_error(H, R, 3, 3, &inbound[14..]);
    let o = run(&mut n, &mut s, &[(err, 2 * SEC)]);
    assert!(verify_all_checksums(&o.frames[0]));
    let m = parse_frame(&o.frames[0]).unwrap();
    assert_eq!(m.flow.src, t.src);
    let e = m.icmp_embedded.unwrap();
    assert_eq!((e.flow.dst, e.flow.dst_port), (t.src, t.src_port));
    // An error about a flow without mapping is dropped.
    let stray = build::udp_v4([203, 0, 113, 0], R, 999, 53, b"x");
    let err = build::icmp_v4_error([192, 0, 2, 254], [203, 0, 113, 0], 3, 3, &stray[14..]);
    assert_eq!(
        run(&mut n, &mut s, &[(err, 3 * SEC)]).reason(0),
        Some("no_mapping")
    );
    assert_eq!(counter(&n, "icmp_errors_translated"), 2);
}

#[test]
fn ipv6_policy_and_unsupported_packets() {
    let v6 = build::tcp_v6([0x20; 16], [0x21; 16], 1, 2, 0, 0, SYN, b"");
    let mut s = LocalStore::new();
    let o = run(&mut nat_with(|_| {}), &mut s, &[(v6.clone(), 0)]);
    assert_eq!(o.frames[0], v6);
    assert!(o.reason(0).is_none());
    let o = run(
        &mut nat_with(|c| c.ipv6 = Ipv6Policy::Drop),
        &mut s,
        &[(v6, 0)],
    );
    assert_eq!(o.reason(0), Some("ipv6"));
    let mut frag = build::udp_v4(H, R, 1, 2, &[0u8; 16]);
    frag[14 + 6] = 0x00;
    frag[14 + 7] = 0x02;
    sluice_wire::ipv4::Ipv4Packet::new_unchecked(&mut frag[14..]).fill_checksum();
    assert_eq!(
        run(&mut nat_with(|_| {}), &mut s, &[(frag, 0)]).reason(0),
        Some("fragment")
    );
}

#[test]
fn config_errors_are_clear() {
    let e = |t: fn(&mut Config)| {
        let mut c = cfg();
        t(&mut c);
        build(&c, Namespace(2), std::path::Path::new("."))
            .err()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        e(|c| c.ports = "70-60".into()),
        "nat config: ports: invalid range \"70-60\""
    );
    assert_eq!(
        e(|c| c.pool = vec!["2001:db8::1".into()]),
        "nat config: pool: invalid IPv4 address \"2001:db8::1\" (NAT is IPv4 only)"
    );
    assert_eq!(
        e(|c| c.inside = vec!["10.0.0.0/40".into()]),
        "nat config: inside: invalid prefix length in \"10.0.0.0/40\""
    );
    assert_eq!(
        e(|c| c.pool.clear()),
        "nat config: `pool` needs at least one address"
    );
    let c: Config = serde_json::from_str(
        r#"{"inside": ["10.0.0.0/8"], "pool": ["203.0.113.1"], "ipv6": "drop"}"#,
    )
    .unwrap();
    assert_eq!(
        (c.ports.as_str(), c.ipv6, c.timeouts.udp),
        ("1024-65535", Ipv6Policy::Drop, 300)
    );
    assert!(serde_json::from_str::<Config>(r#"{"insde": []}"#).is_err());
}

#[test]
fn mapping_layout_is_twenty_bytes() {
    let m = Mapping {
        flags: 3,
        item: 77,
        inside_addr: H,
        inside_port: 9,
        last_seen_ns: 5,
    };
    let mut b = Vec::new();
    m.encode(&mut Writer::new(&mut b));
    assert_eq!(b.len(), MAPPING_BYTES);
    assert_eq!(Mapping::decode(&mut Reader::new(&b)).unwrap(), m);
}

/// The stored record under `table` for `flow`.
fn record(s: &mut LocalStore, table: u8, flow: &FlowKey) -> Option<Mapping> {
    let mut ops = Ops::new();
    let id = ops.get(Key::flow(Namespace(2), table, flow, &[]));
    s.execute(&mut ops).unwrap();
    ops.decode::<Mapping>(id).unwrap()
}

#[test]
fn each_direction_refreshes_only_its_own_record() {
    let mut n = nat_with(|c| c.timeouts.udp = 30);
    let mut s = LocalStore::new();
    let out = run(&mut n, &mut s, &[(build::udp_v4(H, R, 7000, 53, b"q"), 0)]);
    let pubf = out.flow(0);
    let fwd = FlowKey {
        zone: 0,
        src: IpAddr::V4(H),
        dst: IpAddr::V4(R),
        src_port: 7000,
        dst_port: 53,
        proto: ip_proto::UDP,
    };
    let rev = pubf.reverse();
    let back = |t| (build::udp_v4(R, v4(pubf.src), 53, pubf.src_port, b"r"), t);
    assert!(run(&mut n, &mut s, &[back(5 * SEC)]).reason(0).is_none());
    assert_eq!(
        record(&mut s, TABLE_REV, &rev).unwrap().last_seen_ns,
        5 * SEC
    );
    assert_eq!(
        record(&mut s, TABLE_FWD, &fwd).unwrap().last_seen_ns,
        0,
        "the reply does not write the forward record"
    );
    run(
        &mut n,
        &mut s,
        &[(build::udp_v4(H, R, 7000, 53, b"q"), 6 * SEC)],
    );
    assert_eq!(
        record(&mut s, TABLE_FWD, &fwd).unwrap().last_seen_ns,
        6 * SEC
    );
    assert_eq!(
        record(&mut s, TABLE_REV, &rev).unwrap().last_seen_ns,
        5 * SEC
    );
}

#[test]
fn timer_deletes_a_mapping_only_when_both_records_are_idle() {
    let mut n = nat_with(|c| c.timeouts.udp = 30);
    let mut s = LocalStore::new();
    let out = run(&mut n, &mut s, &[(build::udp_v4(H, R, 7001, 53, b"q"), 0)]);
    let pubf = out.flow(0);
    let back = |t| (build::udp_v4(R, v4(pubf.src), 53, pubf.src_port, b"r"), t);
    // Only replies keep it alive: the forward record stays at 0 s.
    for t in [10, 20, 28] {
        assert!(run(&mut n, &mut s, &[back(t * SEC)]).reason(0).is_none());
    }
    timers(&mut n, &mut s, 31 * SEC);
    assert_eq!(counter(&n, "expired"), 0, "the reverse record is fresh");
    assert!(run(&mut n, &mut s, &[back(40 * SEC)]).reason(0).is_none());
    timers(&mut n, &mut s, 69 * SEC);
    assert_eq!(
        counter(&n, "expired"),
        0,
        "re-armed at the reverse record's deadline"
    );
    timers(&mut n, &mut s, 71 * SEC);
    assert_eq!(counter(&n, "expired"), 1);
    assert_eq!(
        run(&mut n, &mut s, &[back(72 * SEC)]).reason(0),
        Some("no_mapping")
    );
    assert!(
        record(&mut s, TABLE_REV, &pubf.reverse()).is_none(),
        "both records gone"
    );
}

#[test]
fn a_reply_after_outbound_only_traffic_passes() {
    // The reverse record alone looks expired; the forward one keeps the mapping.
    let mut n = nat_with(|c| c.timeouts.udp = 30);
    let mut s = LocalStore::new();
    let out = run(&mut n, &mut s, &[(build::udp_v4(H, R, 7002, 53, b"q"), 0)]);
    let pubf = out.flow(0);
    for t in [10, 20, 30, 40] {
        let o = run(
            &mut n,
            &mut s,
            &[(build::udp_v4(H, R, 7002, 53, b"q"), t * SEC)],
        );
        assert_eq!(o.flow(0), pubf);
    }
    let back = build::udp_v4(R, v4(pubf.src), 53, pubf.src_port, b"r");
    let o = run(&mut n, &mut s, &[(back.clone(), 45 * SEC)]);
    assert_eq!(o.flow(0).dst, IpAddr::V4(H));
    // Its own record was refreshed (by compare-and-set: it was old).
    assert_eq!(
        record(&mut s, TABLE_REV, &pubf.reverse())
            .unwrap()
            .last_seen_ns,
        45 * SEC
    );
    // Long after both went quiet, the reply is refused even before the timer ran.
    assert_eq!(
        run(&mut n, &mut s, &[(back, 200 * SEC)]).reason(0),
        Some("no_mapping")
    );
}

#[test]
fn established_flows_make_no_round_trip_under_a_lease() {
    use sluice_state::{CacheConfig, FlowCache, Ownership};
    let mut n = nat_with(|_| {});
    let mut s = LocalStore::new();
    let mut c = FlowCache::new(CacheConfig::default());
    c.set_ownership(Some(Ownership::all(1, u64::MAX)), &mut s, 0)
        .unwrap();
    let out = testing::run_frames(
        &mut n,
        &mut c.bind(&mut s, 0),
        &[(build::tcp_v4(H, R, 7003, 80, 1, 0, SYN, b""), 0)],
    );
    let pubf = parse_frame(&out.frames[0]).unwrap().flow;
    let back = |t| {
        (
            build::tcp_v4(R, v4(pubf.src), 80, pubf.src_port, 1, 2, ACK, b"r"),
            t,
        )
    };
    let fwd = |t| (build::tcp_v4(H, R, 7003, 80, 2, 2, ACK, b"q"), t);
    // The first reply reads the reverse record through (its presence is cached).
    testing::run_frames(&mut n, &mut c.bind(&mut s, SEC / 2), &[back(SEC / 2)]);
    let before = s.counters();
    for k in 1..50u64 {
        let t = SEC / 2 + k * 100_000_000;
        let o = testing::run_frames(&mut n, &mut c.bind(&mut s, t), &[fwd(t), back(t)]);
        assert!(o.verdicts.iter().all(|v| *v == Verdict::Forward));
        c.flush_due(&mut s, t).unwrap();
    }
    let d = s.counters().since(&before);
    assert_eq!(d.round_trips, 0, "{d:?}");
    assert!(d.writes > 0, "refreshes reached the store without waiting");
}

#[test]
fn an_unsolicited_packet_never_hides_a_mapping_created_elsewhere() {
    use sluice_state::{CacheConfig, FlowCache, Ownership};
    // Learn which public endpoint the first mapping gets.
    let out = build::udp_v4(H, R, 7100, 53, b"q");
    let pubf = {
        let mut n = nat_with(|_| {});
        run(&mut n, &mut LocalStore::new(), &[(out.clone(), 0)]).flow(0)
    };
    let reply = build::udp_v4(R, v4(pubf.src), 53, pubf.src_port, b"r");
    let hf = parse_frame(&out).unwrap().flow.symmetric_hash();
    let hr = parse_frame(&reply).unwrap().flow.symmetric_hash();
    // Instance A owns the inside flow's hash, B the reply flow's: the switch sends
    // each direction to its owner.
    let shared = SharedLocalStore::new();
    let (mut sa, mut sb) = (shared.handle(), shared.handle());
    let (mut a, mut b) = (nat_with(|_| {}), nat_with(|_| {}));
    let lease = |h: u32| Ownership {
        epoch: 1,
        ranges: vec![(h, h)],
        valid_until_ns: u64::MAX,
    };
    let mut ca = FlowCache::new(CacheConfig::default());
    let mut cb = FlowCache::new(CacheConfig::default());
    ca.set_ownership(Some(lease(hf)), &mut sa, 0).unwrap();
    cb.set_ownership(Some(lease(hr)), &mut sb, 0).unwrap();
    // The reply arrives first (unsolicited): no mapping yet.
    let o = testing::run_frames(&mut b, &mut cb.bind(&mut sb, 1), &[(reply.clone(), 1)]);
    assert_ne!(o.verdicts[0], Verdict::Forward);
    // A creates the mapping; the reply to it must get in on B.
    let o = testing::run_frames(&mut a, &mut ca.bind(&mut sa, 2), &[(out, 2)]);
    assert_eq!(parse_frame(&o.frames[0]).unwrap().flow, pubf);
    let o = testing::run_frames(&mut b, &mut cb.bind(&mut sb, 3), &[(reply.clone(), 3)]);
    assert_eq!(o.verdicts[0], Verdict::Forward, "absence was not cached");
    // From now on B serves the reverse mapping from its cache.
    let hits = cb.stats().hits;
    testing::run_frames(&mut b, &mut cb.bind(&mut sb, 4), &[(reply, 4)]);
    assert_eq!(cb.stats().hits, hits + 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn odd_packets_never_panic(frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..120), 1..8),
                               ports in proptest::collection::vec(any::<u16>(), 8)) {
        let mut n = nat_with(|c| c.ports = "1000-1003".into());
        let mut s = LocalStore::new();
        let mut pkts = Vec::new();
        for (i, fr) in frames.iter().enumerate() {
            let mut g = build::udp_v4(H, R, 1, 2, b"");
            g.truncate(14);
            g.extend_from_slice(fr);
            if parse_frame(&g).is_ok() {
                pkts.push((g, i as u64));
            }
            pkts.push((build::udp_v4(H, R, ports[i], 53, b"q"), i as u64));
            pkts.push((build::udp_v4(R, [203, 0, 113, 1], 53, ports[i], b"r"), i as u64));
            let q = build::udp_v4([203, 0, 113, 0], R, ports[i], 53, b"q");
            pkts.push((build::icmp_v4_error(R, [203, 0, 113, 0], 3, 3, &q[14..14 + 28]), i as u64));
        }
        let o = run(&mut n, &mut s, &pkts);
        for (i, f) in o.frames.iter().enumerate() {
            if o.v[i] == Verdict::Forward && parse_frame(&pkts[i].0).is_ok_and(|m| m.l4 != L4::OtherIp) && verify_all_checksums(&pkts[i].0) {
                prop_assert!(verify_all_checksums(f));
            }
        }
        timers(&mut n, &mut s, u64::MAX);
    }
}

#[test]
fn reserved_ports_spare_pool_round_trips_and_are_never_shared() {
    // Four instances with reserves of 8 on one shared store, flows spread over
    // them: every flow gets its own public endpoint and keeps it everywhere.
    let shared = SharedLocalStore::new();
    let mut inst: Vec<(Nat, SharedLocalStore)> = (0..4)
        .map(|_| {
            (
                nat_with(|c| {
                    c.ports = "3000-3999".into();
                    c.port_reserve = 8;
                }),
                shared.handle(),
            )
        })
        .collect();
    spread_300_flows(&mut inst, 4);
    let reserved: u64 = inst.iter().map(|(n, _)| counter(n, "reserved")).sum();
    assert!(reserved > 0, "instances hold reserves");
}

#[test]
fn a_reserve_costs_one_pool_round_trip_per_block() {
    let mut n = nat_with(|c| {
        c.ports = "3000-3999".into();
        c.port_reserve = 16;
    });
    let mut s = LocalStore::new();
    // Eight batches of two new flows each: the first allocates 2 items and
    // takes a block of 16, the next seven take theirs from the block.
    for b in 0..8u16 {
        let frames: Vec<_> = (0..2u16)
            .map(|i| (build::udp_v4(H, R, 100 + 2 * b + i, 53, b"q"), 1))
            .collect();
        let o = run(&mut n, &mut s, &frames);
        assert!(o.reason(0).is_none() && o.reason(1).is_none());
    }
    assert_eq!(counter(&n, "new_mappings"), 16);
    assert_eq!(counter(&n, "reserved"), 2, "18 allocated, 16 used");
    // Only the first batch allocated: two allocations and one take of 16
    // (plus the pool's creation), not 16 spread over eight round trips.
    assert_eq!(
        s.counters().atomics,
        3 + 1 + 16,
        "allocations, init, claims"
    );
    // Writes: each mapping's reverse record (16), the block's record, and one
    // used count per batch that took from it (7), not a delete and a timer
    // cancel per item.
    assert_eq!(s.counters().writes, 16 + 1 + 7);
}

#[test]
fn a_dead_instances_reserve_returns_to_the_pool_after_its_timer() {
    let shared = SharedLocalStore::new();
    let one_port_each = |c: &mut Config| {
        c.pool = vec!["203.0.113.7".into()];
        c.ports = "6000-6003".into();
        c.port_reserve = 3;
    };
    // A takes one port and reserves the other three, hands one of those to a
    // second flow, then dies (no flush).
    let mut a = nat_with(one_port_each);
    let mut sa = shared.handle();
    assert!(
        run(&mut a, &mut sa, &[(build::udp_v4(H, R, 1, 53, b"q"), SEC)])
            .reason(0)
            .is_none()
    );
    let second = run(&mut a, &mut sa, &[(build::udp_v4(H, R, 9, 53, b"q"), SEC)]);
    assert!(second.reason(0).is_none());
    let second_src = parse_frame(&second.frames[0]).unwrap().flow;
    drop(a);
    // B finds the pool empty until the reservations' timers free them.
    let mut b = nat_with(one_port_each);
    let mut sb = shared.handle();
    let q = |p: u16, t: u64| (build::udp_v4(H, R, p, 53, b"q"), t);
    assert_eq!(
        run(&mut b, &mut sb, &[q(2, 2 * SEC)]).reason(0),
        Some("pool_exhausted")
    );
    timers(&mut b, &mut sb, 30 * SEC);
    assert_eq!(
        run(&mut b, &mut sb, &[q(3, 30 * SEC)]).reason(0),
        Some("pool_exhausted")
    );
    timers(&mut b, &mut sb, 62 * SEC);
    // Only the two it never handed out: the second flow's port stays its own.
    assert_eq!(counter(&b, "reservations_expired"), 2);
    let o = run(
        &mut b,
        &mut sb,
        &[q(4, 62 * SEC), q(5, 62 * SEC), q(6, 62 * SEC)],
    );
    assert!(
        (0..2).all(|i| o.reason(i).is_none()),
        "the dead instance's unused ports are back"
    );
    assert_eq!(o.reason(2), Some("pool_exhausted"));
    for f in &o.frames[..2] {
        let f = parse_frame(f).unwrap().flow;
        assert_ne!(f.src_port, second_src.src_port, "a port held twice");
    }
    // The second flow still translates, on B, to the port A gave it.
    let again = run(
        &mut b,
        &mut sb,
        &[(build::udp_v4(H, R, 9, 53, b"q"), 63 * SEC)],
    );
    assert_eq!(parse_frame(&again.frames[0]).unwrap().flow, second_src);
}

#[test]
fn a_stopping_instance_returns_its_reserve_and_old_items_are_not_used() {
    let mut n = nat_with(|c| {
        c.pool = vec!["203.0.113.7".into()];
        c.ports = "6000-6003".into();
        c.port_reserve = 3;
    });
    let mut s = LocalStore::new();
    let q = |p: u16, t: u64| (build::udp_v4(H, R, p, 53, b"q"), t);
    assert!(run(&mut n, &mut s, &[q(1, SEC)]).reason(0).is_none());
    assert_eq!(counter(&n, "reserved"), 3);
    // Past half their life, reserved items are returned, not used.
    assert!(run(&mut n, &mut s, &[q(2, 40 * SEC)]).reason(0).is_none());
    // Three returned; of the three free items one went to the flow and two to
    // the reserve (the first mapping holds the fourth).
    assert_eq!(counter(&n, "reserved"), 2);
    testing::flush(&mut n, &mut s, 41 * SEC);
    assert_eq!(counter(&n, "reserved"), 0);
    // Two mappings hold two ports; the other two are free again.
    let mut m = nat_with(|c| {
        c.pool = vec!["203.0.113.7".into()];
        c.ports = "6000-6003".into();
    });
    let o = run(
        &mut m,
        &mut s,
        &[q(3, 42 * SEC), q(4, 42 * SEC), q(5, 42 * SEC)],
    );
    assert_eq!((0..3).filter(|&i| o.reason(i).is_none()).count(), 2);
}

#[test]
fn a_new_mapping_starts_at_its_first_packets_time_not_the_batchs() {
    // UDP timeout 30 s. Flow A opens at 1 s, in a batch whose newest packet
    // (flow B) is at 30 s; A's reply exactly 30 s after A's packet finds the
    // mapping expired, as it does when every packet is its own batch.
    let a = build::udp_v4(H, R, 5000, 53, b"q");
    let b = build::udp_v4([10, 0, 0, 6], R, 5001, 53, b"q");
    let first = [(a, SEC), (b, 30 * SEC)];
    let mut reasons = Vec::new();
    for batched in [false, true] {
        let mut n = nat_with(|c| c.timeouts.udp = 30);
        let mut s = LocalStore::new();
        let t = if batched {
            run(&mut n, &mut s, &first).flow(0)
        } else {
            let t = run(&mut n, &mut s, &first[..1]).flow(0);
            run(&mut n, &mut s, &first[1..]);
            t
        };
        let reply = build::udp_v4(R, v4(t.src), 53, t.src_port, b"a");
        let just_before = run(&mut n, &mut s, &[(reply.clone(), 31 * SEC - 1)]);
        assert_eq!(just_before.reason(0), None, "batched: {batched}");
        // A fresh NAT state for the boundary itself (the reply above refreshed it).
        let mut n = nat_with(|c| c.timeouts.udp = 30);
        let mut s = LocalStore::new();
        if batched {
            run(&mut n, &mut s, &first);
        } else {
            run(&mut n, &mut s, &first[..1]);
            run(&mut n, &mut s, &first[1..]);
        }
        reasons.push(run(&mut n, &mut s, &[(reply, 31 * SEC)]).reason(0));
    }
    assert_eq!(reasons, vec![Some("no_mapping"), Some("no_mapping")]);
}

#[test]
fn replies_and_flags_in_the_batch_that_opens_a_mapping_as_one_by_one() {
    let tweak = |c: &mut Config| {
        c.pool = vec!["203.0.113.8/32".into()];
        c.ports = "2000-2001".into();
        c.timeouts.tcp_transitory = 10;
    };
    let syn = (build::tcp_v4(H, R, 40000, 80, 1, 0, SYN, b""), SEC);
    // Allocation is deterministic: learn the public endpoint from a twin.
    let t = run(
        &mut nat_with(tweak),
        &mut LocalStore::new(),
        std::slice::from_ref(&syn),
    )
    .flow(0);
    let (p, pp) = (v4(t.src), t.src_port);
    let pkts = [
        syn,
        (build::tcp_v4(R, p, 80, pp, 9, 2, SYN | ACK, b""), SEC + 1),
        (
            build::tcp_v4(H, R, 40000, 80, 2, 10, ACK | FIN, b""),
            SEC + 2,
        ),
        (build::tcp_v4(R, p, 80, pp, 10, 3, ACK | FIN, b""), SEC + 3),
    ];
    // After both FINs the mapping lasts the transitory timeout (10 s).
    let late = (build::tcp_v4(R, p, 80, pp, 11, 3, ACK, b""), 14 * SEC);
    let mut outs = Vec::new();
    for batched in [false, true] {
        let mut n = nat_with(tweak);
        let mut s = LocalStore::new();
        let mut v: Vec<Option<&str>> = if batched {
            let o = run(&mut n, &mut s, &pkts);
            (0..pkts.len()).map(|i| o.reason(i)).collect()
        } else {
            pkts.iter()
                .map(|p| run(&mut n, &mut s, std::slice::from_ref(p)).reason(0))
                .collect()
        };
        v.push(run(&mut n, &mut s, std::slice::from_ref(&late)).reason(0));
        outs.push(v);
    }
    assert_eq!(outs[0], vec![None, None, None, None, Some("no_mapping")]);
    assert_eq!(outs[1], outs[0]);
}

#[test]
fn an_outbound_packet_after_expiry_gets_a_new_mapping_as_if_its_timer_had_run() {
    // UDP timeout 30 s. The flow goes quiet for 40 s: its next packet gets a
    // new public port, whether the timer ran in between or not, and the old
    // port no longer translates replies.
    let out = |t| (build::udp_v4(H, R, 5000, 53, b"q"), t);
    let mut seen = Vec::new();
    for timer_first in [false, true] {
        let mut n = nat_with(|c| c.timeouts.udp = 30);
        let mut s = LocalStore::new();
        let first = run(&mut n, &mut s, &[out(SEC)]).flow(0);
        if timer_first {
            timers(&mut n, &mut s, 41 * SEC);
        }
        let second = run(&mut n, &mut s, &[out(41 * SEC)]).flow(0);
        assert_ne!(
            first.src_port, second.src_port,
            "timer first: {timer_first}"
        );
        let old_reply = build::udp_v4(R, v4(first.src), 53, first.src_port, b"a");
        let new_reply = build::udp_v4(R, v4(second.src), 53, second.src_port, b"a");
        let o = run(
            &mut n,
            &mut s,
            &[(old_reply, 42 * SEC), (new_reply, 42 * SEC)],
        );
        assert_eq!((o.reason(0), o.reason(1)), (Some("no_mapping"), None));
        timers(&mut n, &mut s, 100 * SEC);
        assert_eq!(counter(&n, "expired"), 2, "both mappings, once each");
        seen.push((first.src_port, second.src_port));
    }
    assert_eq!(seen[0], seen[1]);
}

/// Runs `first` (one batch), then `rest` one packet per batch and, on a
/// fresh NAT, as one batch: the two outcomes of `rest` (reason or frame).
fn one_by_one_and_batched(
    tweak: impl Fn(&mut Config),
    first: &[(Vec<u8>, u64)],
    rest: &[(Vec<u8>, u64)],
) -> [Vec<Result<Vec<u8>, &'static str>>; 2] {
    let outcome = |o: &Out, i: usize| match o.reason(i) {
        None => Ok(o.frames[i].clone()),
        Some(r) => Err(r),
    };
    [false, true].map(|batched| {
        let mut n = nat_with(&tweak);
        let mut s = LocalStore::new();
        run(&mut n, &mut s, first);
        if batched {
            let o = run(&mut n, &mut s, rest);
            (0..rest.len()).map(|i| outcome(&o, i)).collect()
        } else {
            rest.iter()
                .map(|p| outcome(&run(&mut n, &mut s, std::slice::from_ref(p)), 0))
                .collect()
        }
    })
}

fn src_port(o: &Result<Vec<u8>, &'static str>) -> u16 {
    parse_frame(o.as_ref().unwrap()).unwrap().flow.src_port
}

#[test]
fn a_mapping_that_expires_twice_in_one_batch_is_replaced_twice_in_packet_order() {
    // UDP timeout 30 s; one public address, ports handed out in order (an
    // item taken for a mapping that may have expired counts too).
    let tweak = |c: &mut Config| {
        c.pool = vec!["203.0.113.8/32".into()];
        c.ports = "2000-2099".into();
        c.timeouts.udp = 30;
    };
    let out = |h: u8, t: u64| (build::udp_v4([10, 0, 0, h], R, 5000, 53, b"q"), t * SEC);
    let reply = |port: u16, t: u64| (build::udp_v4(R, [203, 0, 113, 8], 53, port, b"a"), t * SEC);
    // Flow A opens 2000 at 1 s and is quiet 40 s: 2001 at 41 s; quiet again
    // 34 s: 2003 at 75 s, after flow B's 2002 and before flow C's 2004.
    let rest = [
        out(5, 41),
        out(6, 50),
        out(5, 75),
        out(7, 76),
        reply(2001, 77),
        reply(2003, 78),
        out(5, 79),
    ];
    let [alone, batched] = one_by_one_and_batched(tweak, &[out(5, 1)], &rest);
    let ports: Vec<u16> = [0, 1, 2, 3, 6].map(|i| src_port(&alone[i])).to_vec();
    assert_eq!(ports, vec![2001, 2002, 2003, 2004, 2003]);
    assert_eq!(alone[4], Err("no_mapping"), "the expired mapping");
    assert!(alone[5].is_ok());
    assert_eq!(batched, alone);
}

#[test]
fn a_reply_earlier_in_the_batch_keeps_a_quiet_outbound_direction_alive() {
    // UDP timeout 30 s. Only replies come for 39 s: the outbound packet at
    // 40 s finds its own record idle, but the reply at 25 s (same batch)
    // kept the mapping alive, as it does one packet per batch.
    let tweak = |c: &mut Config| {
        c.pool = vec!["203.0.113.8/32".into()];
        c.ports = "2000-2099".into();
        c.timeouts.udp = 30;
    };
    let out = |t: u64| (build::udp_v4(H, R, 5000, 53, b"q"), t * SEC);
    let reply = |t: u64| (build::udp_v4(R, [203, 0, 113, 8], 53, 2000, b"a"), t * SEC);
    let rest = [reply(25), out(40), reply(45)];
    let [alone, batched] = one_by_one_and_batched(tweak, &[out(1)], &rest);
    assert!(alone.iter().all(|o| o.is_ok()), "{alone:?}");
    assert_eq!(src_port(&alone[1]), 2000);
    assert_eq!(batched, alone);
}
