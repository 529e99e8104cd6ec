use super::*;
use proptest::prelude::*;
use sluice_nf::{testing, Emitted, Verdict};
use sluice_state::{LocalStore, SharedLocalStore};
use sluice_wire::parse::parse_frame;
use sluice_wire::rewrite::verify_all_checksums;
use sluice_wire::tcp::flags::{ACK, FIN, PSH, RST, SYN};
use sluice_wire::{build, wrap};

const C: [u8; 4] = [10, 0, 0, 1];
const S: [u8; 4] = [192, 0, 2, 7];
const SEC: u64 = 1_000_000_000;
const WEB: &str = "allow tcp from 10.0.0.0/8 to 192.0.2.0/24 port 80,443\n\
                   allow udp from 10.0.0.0/8\nallow icmp from 10.0.0.0/8\n\
                   allow tcp from 2001:db8::/32 port 22\ndefault deny\n";

fn fw_with(rules: &str, tweak: impl FnOnce(&mut Config)) -> Firewall {
    let mut cfg = Config {
        rules: Some(rules.into()),
        ..Default::default()
    };
    tweak(&mut cfg);
    build(&cfg, Namespace(1), Path::new(".")).unwrap()
}

fn fw() -> Firewall {
    fw_with(WEB, |_| {})
}

struct Out {
    v: Vec<Verdict>,
    emitted: Vec<Emitted>,
}

impl Out {
    fn passed(&self) -> Vec<bool> {
        self.v.iter().map(|v| *v == Verdict::Forward).collect()
    }
    fn reason(&self, i: usize) -> Option<&'static str> {
        match self.v[i] {
            Verdict::Forward => None,
            Verdict::Drop(d) => Some(d.reason),
        }
    }
}

fn run(f: &mut dyn NetworkFunction, store: &mut dyn StateStore, frames: &[(Vec<u8>, u64)]) -> Out {
    let o = testing::run_frames(f, store, frames);
    Out {
        v: o.verdicts,
        emitted: o.emitted,
    }
}

fn timers(f: &mut dyn NetworkFunction, store: &mut dyn StateStore, now: u64) {
    testing::run_timers(f, store, now);
}

fn counter(f: &dyn NetworkFunction, name: &str) -> u64 {
    testing::counter(f, name)
}

fn c2s(sp: u16, dp: u16, seq: u32, ack: u32, flags: u8, data: &[u8]) -> Vec<u8> {
    build::tcp_v4(C, S, sp, dp, seq, ack, flags, data)
}
fn s2c(sp: u16, dp: u16, seq: u32, ack: u32, flags: u8, data: &[u8]) -> Vec<u8> {
    build::tcp_v4(S, C, sp, dp, seq, ack, flags, data)
}

/// A whole connection from C:port to S:80, one packet per batch.
fn connection(port: u16, t0: u64) -> Vec<(Vec<u8>, u64)> {
    vec![
        (c2s(port, 80, 100, 0, SYN, b""), t0),
        (s2c(80, port, 500, 101, SYN | ACK, b""), t0 + 1),
        (c2s(port, 80, 101, 501, ACK, b""), t0 + 2),
        (c2s(port, 80, 101, 501, ACK | PSH, b"GET /"), t0 + 3),
        (s2c(80, port, 501, 106, ACK | PSH, b"200 OK"), t0 + 4),
        (c2s(port, 80, 106, 507, ACK | FIN, b""), t0 + 5),
        (s2c(80, port, 507, 107, ACK, b""), t0 + 6),
        (s2c(80, port, 507, 107, ACK | FIN, b""), t0 + 7),
        (c2s(port, 80, 107, 508, ACK, b""), t0 + 8),
    ]
}

fn one_by_one(f: &mut Firewall, s: &mut dyn StateStore, pkts: &[(Vec<u8>, u64)]) -> Vec<bool> {
    pkts.iter()
        .map(|p| run(f, s, std::slice::from_ref(p)).passed()[0])
        .collect()
}

#[test]
fn handshake_data_and_teardown_pass_only_where_allowed() {
    let mut f = fw();
    let mut s = LocalStore::new();
    assert!(one_by_one(&mut f, &mut s, &connection(40000, 0))
        .iter()
        .all(|&x| x));
    assert_eq!(counter(&f, "new_flows"), 1);
    // Same exchange to a port the rules do not allow: the SYN is denied and nothing
    // after it has state.
    let denied: Vec<_> = connection(40001, 10)
        .into_iter()
        .map(|(mut fr, t)| {
            let m = parse_frame(&fr).unwrap();
            let (sp, dp) = (m.flow.src_port, m.flow.dst_port);
            let mut m2 = m;
            if dp == 80 {
                sluice_wire::rewrite::set_endpoint(
                    &mut fr,
                    &mut m2,
                    sluice_wire::rewrite::Endpoint::Dst,
                    m.flow.dst,
                    8080,
                )
                .unwrap();
            } else {
                assert_eq!(sp, 80);
                sluice_wire::rewrite::set_endpoint(
                    &mut fr,
                    &mut m2,
                    sluice_wire::rewrite::Endpoint::Src,
                    m.flow.src,
                    8080,
                )
                .unwrap();
            }
            (fr, t)
        })
        .collect();
    let out: Vec<_> = denied
        .iter()
        .map(|p| run(&mut f, &mut s, std::slice::from_ref(p)))
        .collect();
    assert_eq!(out[0].reason(0), Some("rule_deny"));
    assert!(out[1..].iter().all(|o| o.reason(0) == Some("no_state")));
    // The server may not open connections towards the client.
    let o = run(&mut f, &mut s, &[(s2c(80, 40000, 1, 0, SYN, b""), 100)]);
    assert_eq!(o.reason(0), Some("rule_deny"));
    // The conntrack record went through the states and sits in TIME_WAIT.
    let canon = parse_frame(&c2s(40000, 80, 0, 0, 0, b""))
        .unwrap()
        .flow
        .canonical()
        .0;
    let mut ops = Ops::new();
    let g = ops.get(Key::flow(Namespace(1), TABLE_CONN, &canon, &[]));
    s.execute(&mut ops).unwrap();
    assert_eq!(
        ops.decode::<Conn>(g).unwrap().unwrap().state,
        State::TimeWait
    );
}

#[test]
fn whole_connection_in_one_batch_sees_its_own_state() {
    let mut f = fw();
    let mut s = LocalStore::new();
    let out = run(&mut f, &mut s, &connection(40000, 0));
    assert!(out.passed().iter().all(|&x| x));
    assert_eq!(
        s.counters().round_trips,
        2,
        "one read and one write round trip"
    );
    assert_eq!(
        s.counters().reads,
        1,
        "one read for the batch's single flow"
    );
}

#[test]
fn established_packets_cost_one_batched_read_and_no_write() {
    let mut f = fw();
    let mut s = LocalStore::new();
    one_by_one(&mut f, &mut s, &connection(40000, 0)[..3]);
    let before = s.counters();
    let data: Vec<_> = (0..16)
        .map(|i| (c2s(40000, 80, 101 + i, 501, ACK, b"x"), 10 + i as u64))
        .collect();
    assert!(run(&mut f, &mut s, &data).passed().iter().all(|&x| x));
    let d = s.counters().since(&before);
    assert_eq!((d.round_trips, d.reads, d.writes), (1, 1, 0));
}

#[test]
fn mid_stream_without_state_is_dropped_or_reset() {
    let mut f = fw();
    let mut s = LocalStore::new();
    let o = run(
        &mut f,
        &mut s,
        &[(c2s(40000, 80, 1000, 2000, ACK, b"data"), 0)],
    );
    assert_eq!(o.reason(0), Some("no_state"));
    assert!(o.emitted.is_empty());

    let mut f = fw_with(WEB, |c| c.reject_with_rst = true);
    let pkt = c2s(40000, 80, 1000, 2000, ACK | PSH, b"data");
    let o = run(&mut f, &mut s, &[(pkt, 0)]);
    assert_eq!(o.reason(0), Some("no_state"));
    assert_eq!(o.emitted.len(), 1);
    let rst = &o.emitted[0].frame;
    assert!(verify_all_checksums(rst));
    let m = parse_frame(rst).unwrap();
    assert_eq!(m.flow, parse_frame(&o_frame()).unwrap().flow.reverse());
    assert_eq!(m.tcp_flags, RST);
    assert_eq!(m.tcp_seq, 2000, "seq is the incoming ack");
    assert_eq!(&rst[0..6], &build::SRC_MAC.0, "MACs swapped");
    assert_eq!(&rst[6..12], &build::DST_MAC.0);

    // Without ACK, the RST acknowledges the segment instead.
    let o = run(
        &mut f,
        &mut s,
        &[(c2s(40000, 80, 1000, 0, PSH, b"data"), 0)],
    );
    let m = parse_frame(&o.emitted[0].frame).unwrap();
    assert_eq!((m.tcp_flags, m.tcp_seq, m.tcp_ack), (RST | ACK, 0, 1004));
    assert!(verify_all_checksums(&o.emitted[0].frame));
    // A RST is never answered.
    let o = run(&mut f, &mut s, &[(c2s(40000, 80, 1000, 0, RST, b""), 0)]);
    assert_eq!(o.reason(0), Some("no_state"));
    assert!(o.emitted.is_empty());
    assert_eq!(counter(&f, "rsts_sent"), 2);

    fn o_frame() -> Vec<u8> {
        c2s(40000, 80, 0, 0, ACK, b"")
    }
}

#[test]
fn tcp_state_expires_after_its_timeout() {
    let mut f = fw();
    let mut s = LocalStore::new();
    one_by_one(&mut f, &mut s, &connection(40000, 0)[..3]);
    let data = |t| (c2s(40000, 80, 101, 501, ACK, b"x"), t);
    assert!(run(&mut f, &mut s, &[data(3599 * SEC)]).passed()[0]);
    // Idle for just under an hour after the last refresh: still there.
    assert!(run(&mut f, &mut s, &[data((3599 + 3599) * SEC)]).passed()[0]);
    // Idle for an hour: gone, before any timer runs.
    let late = (3599 + 3599 + 3600) * SEC;
    assert_eq!(
        run(&mut f, &mut s, &[data(late)]).reason(0),
        Some("no_state")
    );
    // The timers delete it (re-armed each time it was found refreshed).
    timers(&mut f, &mut s, 3600 * SEC);
    assert_eq!(s.len(), 1, "refreshed record survives its first timer");
    timers(&mut f, &mut s, late);
    assert_eq!(s.len(), 0);
    assert_eq!(counter(&f, "expired"), 1);

    // A handshake that never completes lasts the SYN timeout (30 s).
    let mut f = fw();
    run(&mut f, &mut s, &[(c2s(40001, 80, 1, 0, SYN, b""), 0)]);
    let sa = |t| (s2c(80, 40001, 9, 2, SYN | ACK, b""), t);
    assert!(run(&mut f, &mut s, &[sa(29 * SEC)]).passed()[0]);
    assert_eq!(
        run(&mut f, &mut s, &[sa(60 * SEC)]).reason(0),
        Some("no_state")
    );
    timers(&mut f, &mut s, 60 * SEC);
    assert_eq!(s.len(), 0);
}

#[test]
fn closing_states_use_the_closing_timeouts() {
    let mut f = fw_with(WEB, |c| {
        c.timeouts.tcp_time_wait = 5;
        c.timeouts.tcp_closed = 2
    });
    let mut s = LocalStore::new();
    one_by_one(&mut f, &mut s, &connection(40000, 0));
    let late_ack = |t| (c2s(40000, 80, 107, 508, ACK, b""), t);
    assert!(run(&mut f, &mut s, &[late_ack(4 * SEC)]).passed()[0]);
    assert_eq!(
        run(&mut f, &mut s, &[late_ack(10 * SEC)]).reason(0),
        Some("no_state")
    );
    timers(&mut f, &mut s, 10 * SEC);
    assert_eq!(
        s.len(),
        0,
        "TIME_WAIT's timer was re-armed to its shorter timeout"
    );
    // A RST closes; a new SYN may then reuse the 4-tuple.
    one_by_one(&mut f, &mut s, &connection(40002, 20 * SEC)[..3]);
    assert!(
        run(
            &mut f,
            &mut s,
            &[(s2c(80, 40002, 501, 0, RST, b""), 21 * SEC)]
        )
        .passed()[0]
    );
    assert_eq!(
        run(
            &mut f,
            &mut s,
            &[(c2s(40002, 80, 101, 501, ACK, b"x"), 24 * SEC)]
        )
        .reason(0),
        Some("no_state")
    );
    assert!(one_by_one(&mut f, &mut s, &connection(40002, 25 * SEC))
        .iter()
        .all(|&x| x));
}

#[test]
fn udp_and_icmp_echo_idle_timeouts() {
    let mut f = fw();
    let mut s = LocalStore::new();
    let q = |t| (build::udp_v4(C, S, 5353, 53, b"q"), t);
    let r = |t| (build::udp_v4(S, C, 53, 5353, b"r"), t);
    assert!(run(&mut f, &mut s, &[q(0)]).passed()[0]);
    assert!(run(&mut f, &mut s, &[r(29 * SEC)]).passed()[0]);
    assert!(
        run(&mut f, &mut s, &[r(58 * SEC)]).passed()[0],
        "refreshed at 29 s"
    );
    assert_eq!(
        run(&mut f, &mut s, &[r(89 * SEC)]).reason(0),
        Some("rule_deny"),
        "expired: the reply is a new, denied flow"
    );

    let req = |t| (build::icmp_v4_echo(C, S, true, 7, 1), t);
    let rep = |t| (build::icmp_v4_echo(S, C, false, 7, 1), t);
    assert_eq!(run(&mut f, &mut s, &[rep(0)]).reason(0), Some("no_state"));
    assert!(run(&mut f, &mut s, &[req(100 * SEC)]).passed()[0]);
    assert!(run(&mut f, &mut s, &[rep(101 * SEC)]).passed()[0]);
    assert_eq!(
        run(&mut f, &mut s, &[rep(131 * SEC)]).reason(0),
        Some("no_state")
    );
    timers(&mut f, &mut s, 200 * SEC);
    assert_eq!(s.len(), 0);
    assert_eq!(counter(&f, "expired"), 2);
}

#[test]
fn icmp_errors_pass_only_for_tracked_flows() {
    let mut f = fw();
    let mut s = LocalStore::new();
    let q = build::udp_v4(C, S, 5353, 53, b"query");
    run(&mut f, &mut s, &[(q.clone(), 0)]);
    let err = build::icmp_v4_error([192, 0, 2, 254], C, 3, 3, &q[14..]);
    assert!(run(&mut f, &mut s, &[(err, SEC)]).passed()[0]);
    let other = build::udp_v4(C, S, 5354, 53, b"query");
    let err = build::icmp_v4_error([192, 0, 2, 254], C, 3, 3, &other[14..]);
    assert_eq!(
        run(&mut f, &mut s, &[(err, SEC)]).reason(0),
        Some("no_state")
    );
    assert_eq!(counter(&f, "related"), 1);
}

#[test]
fn fragments_are_dropped_unless_allowed() {
    let mut frag = build::udp_v4(C, S, 1, 2, &[0u8; 16]);
    frag[14 + 6] = 0x00;
    frag[14 + 7] = 0x02;
    sluice_wire::ipv4::Ipv4Packet::new_unchecked(&mut frag[14..]).fill_checksum();
    let mut s = LocalStore::new();
    let o = run(&mut fw(), &mut s, &[(frag.clone(), 0)]);
    assert_eq!(o.reason(0), Some("fragment"));
    let o = run(
        &mut fw_with(WEB, |c| c.allow_fragments = true),
        &mut s,
        &[(frag, 0)],
    );
    assert!(o.passed()[0]);
}

#[test]
fn ipv6_connections_are_tracked() {
    let mut f = fw();
    let mut s = LocalStore::new();
    let a: [u8; 16] = "2001:db8::1"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets();
    let b: [u8; 16] = "2001:db9::2"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets();
    let o = run(
        &mut f,
        &mut s,
        &[
            (build::tcp_v6(a, b, 1000, 22, 1, 0, SYN, b""), 0),
            (build::tcp_v6(b, a, 22, 1000, 9, 2, SYN | ACK, b""), 1),
            (build::tcp_v6(a, b, 1000, 22, 2, 10, ACK, b""), 2),
            (build::tcp_v6(b, a, 22, 1001, 9, 2, SYN, b""), 3),
        ],
    );
    assert_eq!(o.passed(), vec![true, true, true, false]);
}

/// A scripted mix of flows used to compare deployments.
fn script() -> Vec<(Vec<u8>, u64)> {
    let mut v = Vec::new();
    for i in 0..6u16 {
        v.extend(connection(41000 + i, i as u64 * SEC));
    }
    for i in 0..4u16 {
        v.push((build::udp_v4(C, S, 6000 + i, 53, b"q"), 3 * SEC));
        v.push((build::udp_v4(S, C, 53, 6000 + i, b"r"), 3 * SEC));
        v.push((build::udp_v4(S, C, 53, 7000 + i, b"r"), 3 * SEC));
        v.push((c2s(42000 + i, 22, 1, 0, SYN, b""), 3 * SEC));
        v.push((c2s(43000 + i, 80, 1, 1, ACK, b"mid"), 3 * SEC));
    }
    // Interleave flows, keeping each flow's own order and making time monotone.
    let mut out: Vec<(Vec<u8>, u64)> = Vec::new();
    let (a, b) = v.split_at(v.len() / 2);
    let mut ia = a.iter();
    let mut ib = b.iter();
    loop {
        match (ia.next(), ib.next()) {
            (None, None) => break,
            (x, y) => out.extend(x.into_iter().chain(y).cloned()),
        }
    }
    let mut t = 0;
    for (_, ts) in out.iter_mut() {
        t = (t + 1).max(*ts);
        *ts = t;
    }
    out
}

fn counters_of(fs: &[&Firewall]) -> Vec<(&'static str, u64)> {
    let mut total: Vec<(&'static str, u64)> = Vec::new();
    for f in fs {
        let mut v = Vec::new();
        f.counters(&mut v);
        if total.is_empty() {
            total = v;
        } else {
            for (t, x) in total.iter_mut().zip(v) {
                t.1 += x.1;
            }
        }
    }
    total
}

#[test]
fn two_instances_sharing_a_store_behave_as_one() {
    let pkts = script();
    let mut one = fw();
    let mut s = LocalStore::new();
    let expect = one_by_one(&mut one, &mut s, &pkts);
    assert!(expect.iter().any(|&x| x) && expect.iter().any(|&x| !x));

    for batch in [1usize, 3, 8] {
        let shared = SharedLocalStore::new();
        let mut stores = [shared.handle(), shared.handle()];
        let mut fws = [fw(), fw()];
        let mut got = Vec::new();
        for (n, chunk) in pkts.chunks(batch).enumerate() {
            let k = n % 2;
            got.extend(run(&mut fws[k], &mut stores[k], chunk).passed());
        }
        assert_eq!(got, expect, "batch size {batch}");
        assert_eq!(
            counters_of(&[&fws[0], &fws[1]]),
            counters_of(&[&one]),
            "batch size {batch}"
        );
    }
}

#[test]
fn rule_file_errors_name_file_and_line() {
    let dir = std::env::temp_dir().join(format!("sluice-fw-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("bad.fw"),
        "# header\nallow tcp port 80\nallow tcpp from any\n",
    )
    .unwrap();
    std::fs::write(dir.join("good.fw"), "allow tcp port 80\n").unwrap();
    let cfg = |f: &str| Config {
        rules_file: Some(f.into()),
        ..Default::default()
    };
    let e = build(&cfg("bad.fw"), Namespace(1), &dir).err().unwrap();
    assert_eq!(e.to_string(), "bad.fw:3: unknown protocol \"tcpp\"");
    let f = build(&cfg("good.fw"), Namespace(1), &dir).unwrap();
    assert_eq!(f.rules().len(), 1);
    let e = build(&cfg("missing.fw"), Namespace(1), &dir).err().unwrap();
    assert!(matches!(e, ConfigError::Io { .. }), "{e}");
    assert!(e.to_string().contains("missing.fw: cannot read rule file"));
    let e = build(&Config::default(), Namespace(1), &dir).err().unwrap();
    assert!(matches!(e, ConfigError::Invalid(_)));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn config_deserialises_with_defaults_and_rejects_unknown_fields() {
    let c: Config =
        serde_json::from_str(r#"{"rules": "default allow", "timeouts": {"udp": 5}}"#).unwrap();
    assert_eq!(c.timeouts.udp, 5);
    assert_eq!(c.timeouts.tcp_established, 3600);
    assert!(!c.reject_with_rst);
    assert!(serde_json::from_str::<Config>(r#"{"rules": "x", "reject_with_rs": true}"#).is_err());
}

#[test]
fn corrupt_state_is_counted_not_trusted() {
    let mut f = fw();
    let mut s = LocalStore::new();
    let canon = parse_frame(&c2s(40000, 80, 0, 0, 0, b""))
        .unwrap()
        .flow
        .canonical()
        .0;
    let key = Key::flow(Namespace(1), TABLE_CONN, &canon, &[]);
    let mut ops = Ops::new();
    ops.put(key, b"\x07garbage");
    ops.arm_timer(key, 5);
    s.execute(&mut ops).unwrap();
    let o = run(&mut f, &mut s, &[(c2s(40000, 80, 1, 1, ACK, b""), 0)]);
    assert_eq!(o.reason(0), Some("no_state"));
    assert_eq!(counter(&f, "decode_errors"), 1);
    timers(&mut f, &mut s, 10);
    assert_eq!(s.len(), 0);
}

fn arp() -> Vec<u8> {
    let mut arp = vec![0u8; 60];
    arp[12] = 0x08;
    arp[13] = 0x06;
    arp
}

#[test]
fn a_default_deny_firewall_denies_what_it_cannot_classify() {
    let mut s = LocalStore::new();
    let frames = [(arp(), 0), (wrap::stp_bpdu(), 1)];
    let mut lcp = wrap::pppoe(&c2s(1, 80, 1, 0, SYN, b""), 1);
    lcp[20] = 0xc0;
    lcp[21] = 0x21;
    let frames = [frames[0].clone(), frames[1].clone(), (lcp, 2)];
    let mut f = fw();
    let o = run(&mut f, &mut s, &frames);
    assert_eq!(o.passed(), [false, false, false]);
    assert_eq!(o.reason(0), Some("non_ip"));
    assert_eq!(counter(&f, "non_ip_denied"), 3);
    assert_eq!(s.counters().round_trips, 0);
    // Said otherwise, by the setting or by a `default allow` policy.
    let mut f = fw_with(WEB, |c| c.non_ip = Some(NonIpPolicy::Allow));
    assert_eq!(run(&mut f, &mut s, &frames).passed(), [true, true, true]);
    assert_eq!(counter(&f, "non_ip_passed"), 3);
    let mut f = fw_with("default allow", |_| {});
    assert_eq!(run(&mut f, &mut s, &frames).passed(), [true, true, true]);
    let mut f = fw_with("default allow", |c| c.non_ip = Some(NonIpPolicy::Deny));
    assert_eq!(run(&mut f, &mut s, &frames).passed(), [false, false, false]);
}

#[test]
fn ip_under_tags_pppoe_and_mpls_is_decided_by_the_rules() {
    let syn = c2s(40000, 80, 100, 0, SYN, b"");
    let ssh = c2s(40001, 22, 100, 0, SYN, b"");
    for wrapped in [
        |f: &[u8]| wrap::qinq(f, 10, 20),
        |f: &[u8]| wrap::tags(f, &[(0x9100, 1), (0x88a8, 2), (0x8100, 3)]),
        |f: &[u8]| wrap::pppoe(f, 7),
        |f: &[u8]| wrap::qinq(&wrap::pppoe(f, 7), 1, 2),
        |f: &[u8]| wrap::mpls(f, &[16, 17]),
        |f: &[u8]| wrap::pbb(f, 5),
        |f: &[u8]| wrap::vn_tag(f),
    ] {
        let mut s = LocalStore::new();
        let mut f = fw();
        let o = run(&mut f, &mut s, &[(wrapped(&syn), 0), (wrapped(&ssh), 1)]);
        assert_eq!(o.passed(), [true, false]);
        assert_eq!(o.reason(1), Some("rule_deny"));
        // Only `default deny`: nothing passes.
        let mut s = LocalStore::new();
        let mut f = fw_with("default deny", |_| {});
        let o = run(&mut f, &mut s, &[(wrapped(&syn), 0), (wrapped(&ssh), 1)]);
        assert_eq!(o.passed(), [false, false]);
    }
}

#[test]
fn rules_match_vlan_ids() {
    let mut s = LocalStore::new();
    let rules = "allow tcp port 80 vlan 10,30-40\ndefault deny";
    let syn = c2s(40000, 80, 100, 0, SYN, b"");
    let mut f = fw_with(rules, |_| {});
    let o = run(
        &mut f,
        &mut s,
        &[
            (wrap::tags(&syn, &[(0x8100, 10)]), 0),
            (wrap::tags(&syn, &[(0x8100, 20)]), 1),
            (wrap::qinq(&syn, 35, 99), 2),
            (syn.clone(), 3),
        ],
    );
    assert_eq!(o.passed(), [true, false, true, false]);
}

const O1: [u8; 4] = [198, 51, 100, 1];
const O2: [u8; 4] = [198, 51, 100, 2];

fn vx(vni: u32, inner: &[u8]) -> Vec<u8> {
    wrap::vxlan(O1.into(), O2.into(), vni, inner)
}

#[test]
fn a_tunnel_passes_only_if_its_outer_and_inner_packets_are_allowed() {
    let mut s = LocalStore::new();
    let rules = "allow outer udp from 198.51.100.0/24 to 198.51.100.0/24 port 4789\n\
                 allow inner tcp to 192.0.2.0/24 port 80 vni 100\n\
                 default deny";
    let syn = c2s(40000, 80, 100, 0, SYN, b"");
    let ssh = c2s(40000, 22, 100, 0, SYN, b"");
    let mut f = fw_with(rules, |_| {});
    let wrong_outer = wrap::vxlan(O1.into(), [203, 0, 113, 9].into(), 100, &syn);
    let o = run(
        &mut f,
        &mut s,
        &[
            (vx(100, &syn), 0),
            (vx(100, &ssh), 1),
            (vx(200, &syn), 2),
            (wrong_outer, 3),
            (syn.clone(), 4),
        ],
    );
    assert_eq!(o.passed(), [true, false, false, false, false]);
    assert_eq!(o.reason(1), Some("rule_deny"));
    assert_eq!(o.reason(3), Some("outer_deny"));
    assert_eq!(counter(&f, "outer_denies"), 1);
    // The reply travels the tunnel the other way (VXLAN's replies go to port
    // 4789 too), the inner flow passes by its state.
    let synack = s2c(80, 40000, 500, 101, SYN | ACK, b"");
    let back = wrap::vxlan(O2.into(), O1.into(), 100, &synack);
    assert_eq!(run(&mut f, &mut s, &[(back, 5)]).passed(), [true]);
    // Another tenant's identical 5-tuple in VNI 200 shares none of that state.
    let ack = c2s(40000, 80, 101, 501, ACK, b"");
    let o = run(&mut f, &mut s, &[(vx(100, &ack), 6), (vx(200, &ack), 7)]);
    assert_eq!(o.passed(), [true, false]);
    assert_eq!(o.reason(1), Some("no_state"));
}

#[test]
fn an_inner_packet_cannot_borrow_the_outer_rules_or_the_reverse() {
    let mut s = LocalStore::new();
    // Only web traffic to 192.0.2.7: a VXLAN packet to anywhere whose inner
    // packet is web traffic to 192.0.2.7 must not pass, nor a tunnel the outer
    // rules allow carrying something else.
    let mut f = fw_with("allow tcp to 192.0.2.7 port 80\ndefault deny", |_| {});
    let syn = c2s(40000, 80, 100, 0, SYN, b"");
    let o = run(&mut f, &mut s, &[(vx(1, &syn), 0)]);
    assert_eq!(o.passed(), [false]);
    assert_eq!(o.reason(0), Some("outer_deny"));
    let mut f = fw_with("allow udp port 4789\ndefault deny", |_| {});
    let o = run(&mut f, &mut s, &[(vx(1, &syn), 0)]);
    assert_eq!(o.reason(0), Some("rule_deny"));
    // Every tunnel kind is opened and decided the same way.
    let o1: sluice_wire::IpAddr = O1.into();
    let o2: sluice_wire::IpAddr = O2.into();
    let mut f = fw_with(
        "allow outer any\nallow inner tcp port 80\ndefault deny",
        |_| {},
    );
    for t in [
        wrap::ip_in_ip(o1, o2, &syn),
        wrap::gre(o1, o2, Some(5 << 8), true, &syn),
        wrap::erspan(o1, o2, 3, 9, &syn),
        wrap::geneve(o1, o2, 4, &syn),
        wrap::vxlan_gpe(o1, o2, 4, &syn),
    ] {
        assert_eq!(run(&mut f, &mut s, &[(t, 0)]).passed(), [true]);
    }
    let ssh = c2s(40000, 22, 100, 0, SYN, b"");
    assert_eq!(
        run(&mut f, &mut s, &[(wrap::gre(o1, o2, None, false, &ssh), 0)]).passed(),
        [false]
    );
}

#[test]
fn dropped_packets_are_left_alone() {
    let mut f = fw_with("default allow", |_| {});
    let mut s = LocalStore::new();
    let o = run(&mut f, &mut s, &[(arp(), 0)]);
    assert!(o.passed()[0]);
    assert_eq!(s.counters().round_trips, 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn odd_packets_never_panic(frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..120), 1..8),
                               flags in proptest::collection::vec(any::<u8>(), 8), ports in proptest::collection::vec(any::<u16>(), 8)) {
        let mut f = fw_with(WEB, |c| c.reject_with_rst = true);
        let mut s = LocalStore::new();
        // Random bytes behind a valid Ethernet + IPv4 prefix, kept only if they parse.
        let mut pkts = Vec::new();
        for (i, fr) in frames.iter().enumerate() {
            let mut g = build::udp_v4(C, S, 1, 2, b"");
            g.truncate(14);
            g.extend_from_slice(fr);
            if parse_frame(&g).is_ok() {
                pkts.push((g, i as u64));
            }
            let t = c2s(ports[i], 80, 1, 2, flags[i], b"abc");
            pkts.push((t, i as u64));
            let t = s2c(80, ports[i], 1, 2, flags[i], b"");
            pkts.push((t, i as u64));
        }
        let o = run(&mut f, &mut s, &pkts);
        for e in &o.emitted {
            prop_assert!(verify_all_checksums(&e.frame));
        }
        timers(&mut f, &mut s, u64::MAX);
    }
}

#[test]
fn expiry_is_judged_at_each_packets_own_time_and_agrees_with_timers() {
    // Established timeout 100 s. Data just below the deadline refreshes the
    // connection; data exactly at the next deadline finds it gone. In one
    // batch, one by one, and one by one with the timers run at every
    // packet's time first: the same verdicts.
    let data = |t| (c2s(40000, 80, 101, 501, ACK, b"x"), t);
    let pkts = [data(100 * SEC + 1), data(200 * SEC + 1)];
    let mut all = Vec::new();
    for mode in 0..3 {
        let mut f = fw_with(WEB, |c| c.timeouts.tcp_established = 100);
        let mut s = LocalStore::new();
        one_by_one(&mut f, &mut s, &connection(40000, 0)[..3]);
        let v: Vec<Option<&str>> = match mode {
            0 => {
                let o = run(&mut f, &mut s, &pkts);
                (0..2).map(|i| o.reason(i)).collect()
            }
            _ => pkts
                .iter()
                .map(|p| {
                    if mode == 2 {
                        timers(&mut f, &mut s, p.1);
                    }
                    run(&mut f, &mut s, std::slice::from_ref(p)).reason(0)
                })
                .collect(),
        };
        all.push(v);
    }
    assert_eq!(all[0], vec![None, Some("no_state")]);
    assert!(all.iter().all(|v| *v == all[0]), "{all:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// The outer-decision cache answers what the rules answer, whatever the
    /// order, repetition and slot collisions of the tuples it sees.
    #[test]
    fn the_outer_cache_answers_as_the_rules(tuples in proptest::collection::vec((0u8..4, 0u16..3, 0u32..3, any::<bool>()), 1..400)) {
        let rules = RuleSet::parse(
            "allow outer udp from 198.51.100.0/24 port 4789 vni 1\n\
             deny outer udp from 198.51.100.3\n\
             allow outer udp to 198.51.100.0/24 port 6081\n\
             allow outer gre vlan 2\n\
             default deny",
            "t",
        )
        .unwrap();
        let mut cache = OuterCache::new();
        for (host, port, id, gre) in tuples {
            let outer = FlowKey {
                zone: 0,
                src: [198, 51, 100, host].into(),
                dst: [198, 51, 100, 9].into(),
                src_port: if gre { 0 } else { 40000 + port },
                dst_port: if gre { 0 } else { [4789, 6081, 53][port as usize] },
                proto: if gre { 47 } else { 17 },
            };
            let scope = Scope { layer: Layer::Inner, vlan: Some(id as u16), vni: Some(id) };
            prop_assert_eq!(cache.allowed(&rules, &outer, &scope), rules.outer_allowed(&outer, &scope));
        }
    }
}
