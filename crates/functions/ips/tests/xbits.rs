//! `xbits`: bits per host or host pair, set by a rule on one flow and tested
//! by rules on others, with expiry by packet time, kept in the store
//! ([`sluice_ips::xbits`]).

use sluice_ips::rules::{self, RuleSyntax};
use sluice_state::LocalStore;
use sluice_wire::build::udp_v4;

mod common;

const A: [u8; 4] = [10, 0, 0, 1];
const B: [u8; 4] = [10, 0, 0, 2];
const S: [u8; 4] = [192, 168, 1, 2];
const S2: [u8; 4] = [192, 168, 1, 3];
const SEC: u64 = 1_000_000_000;
const NONE: Vec<u32> = Vec::new();

fn dgram(src: [u8; 4], dst: [u8; 4], sport: u16, data: &[u8]) -> Vec<u8> {
    udp_v4(src, dst, sport, 5000, data)
}

/// The sids alerted on `frames` run as one batch at `t`.
fn at(ips: &mut sluice_ips::Ips, st: &mut LocalStore, t: u64, frames: &[Vec<u8>]) -> Vec<u32> {
    common::run_in(ips, st, frames, t)
        .0
        .into_iter()
        .map(|a| a.0)
        .collect()
}

const SET_SRC: &str = "alert udp any any -> any any (msg:\"login\"; content:\"login\"; xbits:set,ET.seen,track ip_src,expire 10; noalert; sid:1;)";
const ISSET_SRC: &str = "alert udp any any -> any any (msg:\"after login\"; content:\"payload\"; xbits:isset,ET.seen,track ip_src; sid:2;)";

#[test]
fn a_host_bit_set_on_one_flow_is_seen_by_another_within_its_expiry() {
    let mut ips = common::ips_with(&[SET_SRC, ISSET_SRC], &[]);
    let mut st = LocalStore::new();
    // Before any set: nothing.
    assert_eq!(
        at(&mut ips, &mut st, SEC, &[dgram(A, S, 4000, b"payload")]),
        NONE
    );
    // Set by A on one flow (noalert: no alert of its own).
    assert_eq!(
        at(&mut ips, &mut st, 2 * SEC, &[dgram(A, S, 4001, b"login")]),
        NONE
    );
    // Another flow of A (other port, other server) 5 s later: set.
    assert_eq!(
        at(
            &mut ips,
            &mut st,
            7 * SEC,
            &[dgram(A, S2, 4002, b"payload")]
        ),
        vec![2]
    );
    // Another host: not its bit.
    assert_eq!(
        at(&mut ips, &mut st, 7 * SEC, &[dgram(B, S, 4003, b"payload")]),
        NONE
    );
    // 10 s after the set it has lapsed (packet time, not a clock).
    assert_eq!(
        at(
            &mut ips,
            &mut st,
            12 * SEC,
            &[dgram(A, S, 4004, b"payload")]
        ),
        NONE
    );
    assert_eq!(ips.stats().xbits_withheld, 3);
    assert_eq!(ips.stats().alerts, 1);
}

#[test]
fn sets_and_checks_in_one_batch_follow_packet_order() {
    let mut ips = common::ips_with(&[SET_SRC, ISSET_SRC], &[]);
    let frames = [
        dgram(A, S, 4000, b"payload"), // before the set: withheld
        dgram(A, S, 4001, b"login"),
        dgram(A, S, 4002, b"payload"), // after: raised
    ];
    assert_eq!(at(&mut ips, &mut LocalStore::new(), SEC, &frames), vec![2]);
}

#[test]
fn the_bits_live_in_the_store_across_instances() {
    let mut st = LocalStore::new();
    let mut a = common::ips_with(&[SET_SRC, ISSET_SRC], &[]);
    let mut b = common::ips_with(&[SET_SRC, ISSET_SRC], &[]);
    assert_eq!(
        at(&mut a, &mut st, SEC, &[dgram(A, S, 4000, b"login")]),
        NONE
    );
    assert_eq!(
        at(&mut b, &mut st, 2 * SEC, &[dgram(A, S, 4001, b"payload")]),
        vec![2]
    );
    // A fresh store has no bit.
    assert_eq!(
        at(
            &mut b,
            &mut LocalStore::new(),
            2 * SEC,
            &[dgram(A, S, 4001, b"payload")]
        ),
        NONE
    );
}

#[test]
fn ip_pair_bits_hold_for_both_directions_of_the_pair_only() {
    let set = "alert udp any any -> any any (content:\"login\"; xbits:set,ET.pair,track ip_pair,expire 60; noalert; sid:1;)";
    let isset = "alert udp any any -> any any (content:\"payload\"; xbits:isset,ET.pair,track ip_pair; sid:2;)";
    let mut ips = common::ips_with(&[set, isset], &[]);
    let mut st = LocalStore::new();
    at(&mut ips, &mut st, SEC, &[dgram(A, S, 4000, b"login")]);
    // The reverse direction, another flow: the same pair.
    assert_eq!(
        at(&mut ips, &mut st, 2 * SEC, &[dgram(S, A, 6000, b"payload")]),
        vec![2]
    );
    // A with another server: another pair.
    assert_eq!(
        at(
            &mut ips,
            &mut st,
            2 * SEC,
            &[dgram(A, S2, 4001, b"payload")]
        ),
        NONE
    );
}

#[test]
fn set_by_destination_checked_by_source() {
    // Suricata's documented use: set on the request with ip_dst, check the
    // server's answer with ip_src.
    let set = "alert udp any any -> any any (content:\"req\"; xbits:set,ET.srv,track ip_dst,expire 30; noalert; sid:1;)";
    let isset =
        "alert udp any any -> any any (content:\"resp\"; xbits:isset,ET.srv,track ip_src; sid:2;)";
    let mut ips = common::ips_with(&[set, isset], &[]);
    let mut st = LocalStore::new();
    at(&mut ips, &mut st, SEC, &[dgram(A, S, 4000, b"req")]);
    assert_eq!(
        at(&mut ips, &mut st, 2 * SEC, &[dgram(S, B, 5001, b"resp")]),
        vec![2]
    );
    assert_eq!(
        at(&mut ips, &mut st, 2 * SEC, &[dgram(A, B, 5001, b"resp")]),
        NONE
    );
}

#[test]
fn unset_toggle_and_isnotset() {
    let rules = [
        "alert udp any any -> any any (content:\"on\"; xbits:set,x,track ip_src; noalert; sid:1;)",
        "alert udp any any -> any any (content:\"off\"; xbits:unset,x,track ip_src; noalert; sid:2;)",
        "alert udp any any -> any any (content:\"flip\"; xbits:toggle,x,track ip_src; noalert; sid:3;)",
        "alert udp any any -> any any (content:\"q\"; xbits:isset,x,track ip_src; sid:4;)",
        "alert udp any any -> any any (content:\"q\"; xbits:isnotset,x,track ip_src; sid:5;)",
    ];
    let mut ips = common::ips_with(&rules, &[]);
    let mut st = LocalStore::new();
    let mut t = SEC;
    let mut step = |data: &[u8]| {
        t += SEC;
        at(&mut ips, &mut st, t, &[dgram(A, S, 4000, data)])
    };
    assert_eq!(step(b"q"), vec![5]);
    step(b"on");
    assert_eq!(step(b"q"), vec![4]);
    step(b"off");
    assert_eq!(step(b"q"), vec![5]);
    step(b"flip");
    assert_eq!(step(b"q"), vec![4]);
    step(b"flip");
    assert_eq!(step(b"q"), vec![5]);
    // The default expiry is Suricata's 30 s.
    step(b"on");
    t += 29 * SEC;
    assert_eq!(
        at(&mut ips, &mut st, t, &[dgram(A, S, 4000, b"q")]),
        vec![4]
    );
    t += 2 * SEC;
    assert_eq!(
        at(&mut ips, &mut st, t, &[dgram(A, S, 4000, b"q")]),
        vec![5]
    );
}

#[test]
fn a_failed_condition_sets_nothing_and_thresholds_count_raised_alerts_only() {
    // The rule sets `y` only when `x` is set.
    let rules = [
        "alert udp any any -> any any (content:\"a\"; xbits:isset,x,track ip_src; xbits:set,y,track ip_src; noalert; sid:1;)",
        "alert udp any any -> any any (content:\"b\"; xbits:isset,y,track ip_src; sid:2;)",
        "alert udp any any -> any any (content:\"x\"; xbits:set,x,track ip_src; noalert; sid:3;)",
        "alert udp any any -> any any (content:\"c\"; xbits:isset,x,track ip_src; threshold:type limit,track by_src,count 1,seconds 60; sid:4;)",
    ];
    let mut ips = common::ips_with(&rules, &[]);
    let mut st = LocalStore::new();
    assert_eq!(
        at(
            &mut ips,
            &mut st,
            SEC,
            &[dgram(A, S, 1, b"a"), dgram(A, S, 2, b"b")]
        ),
        NONE
    );
    // `c` before `x`: withheld, and not counted by the threshold.
    assert_eq!(
        at(&mut ips, &mut st, 2 * SEC, &[dgram(A, S, 3, b"c")]),
        NONE
    );
    at(&mut ips, &mut st, 3 * SEC, &[dgram(A, S, 4, b"x")]);
    assert_eq!(
        at(&mut ips, &mut st, 4 * SEC, &[dgram(A, S, 5, b"c")]),
        vec![4]
    );
    assert_eq!(
        at(
            &mut ips,
            &mut st,
            5 * SEC,
            &[dgram(A, S, 6, b"a"), dgram(A, S, 7, b"b")]
        ),
        vec![2]
    );
}

#[test]
fn conditions_that_could_change_a_verdict_are_refused() {
    let v = rules::suricata_default_vars();
    let reason = |r: &str| rules::parse_rule(r, &v).unwrap_err().reason();
    assert_eq!(
        reason("drop udp any any -> any any (content:\"a\"; xbits:isset,x,track ip_src; sid:1;)"),
        "keyword xbits or hostbits condition on a drop rule"
    );
    assert_eq!(
        reason("alert udp any any -> any any (content:\"a\"; xbits:isnotset,x,track ip_src; flowbits:set,f; sid:1;)"),
        "keyword xbits or hostbits condition with a flowbits change"
    );
    // A set on a drop rule is fine: it changes no verdict.
    assert!(rules::parse_rule(
        "drop udp any any -> any any (content:\"a\"; xbits:set,x,track ip_pair,expire 5; sid:1;)",
        &v
    )
    .is_ok());
    for bad in [
        "xbits:set,x;",
        "xbits:set,x,track ip_foo;",
        "xbits:jump,x,track ip_src;",
        "xbits:set,x,track ip_src,expire 0;",
        "xbits:set,x,track ip_src,expire;",
    ] {
        let e = rules::parse_rule(
            &format!("alert udp any any -> any any (content:\"a\"; {bad} sid:1;)"),
            &v,
        )
        .unwrap_err();
        assert!(matches!(e, RuleSyntax::BadValue { .. }), "{bad}: {e:?}");
    }
}

#[test]
fn expired_bits_leave_the_store_by_their_timer() {
    use sluice_nf::{Ctx, NetworkFunction, Streams};
    let mut ips = common::ips_with(&[SET_SRC], &[]);
    let mut st = LocalStore::new();
    at(&mut ips, &mut st, SEC, &[dgram(A, S, 4000, b"login")]);
    assert_eq!(st.len(), 1);
    let streams = Streams::default();
    let (mut events, mut emit) = (Vec::new(), Vec::new());
    for (now, left) in [(5 * SEC, 1), (12 * SEC, 0)] {
        let mut ctx = Ctx {
            now_ns: now,
            stage: 2,
            streams: &streams,
            events: &mut events,
            emit: &mut emit,
        };
        ips.on_timers(&mut ctx, &mut st).unwrap();
        assert_eq!(st.len(), left, "at {now}");
    }
}

/// `hostbits` (Suricata's older keyword) is a host bit like `xbits` tracked
/// by address: the same bits, a fixed expiry of 300 s.
#[test]
fn hostbits_are_host_xbits_with_a_300_second_expiry() {
    let set = "alert udp any any -> any any (content:\"login\"; hostbits:set,ET.seen; hostbits:noalert; sid:1;)";
    let isset =
        "alert udp any any -> any any (content:\"payload\"; hostbits:isset,ET.seen,src; sid:2;)";
    // The bit hostbits set is the one xbits tracked by ip_src tests.
    let isset_x =
        "alert udp any any -> any any (content:\"XPAY\"; xbits:isset,ET.seen,track ip_src; sid:3;)";
    let isnotset_dst =
        "alert udp any any -> any any (content:\"reply\"; hostbits:isnotset,ET.seen,dst; sid:4;)";
    let mut ips = common::ips_with(&[set, isset, isset_x, isnotset_dst], &[]);
    let mut st = LocalStore::new();
    assert_eq!(
        at(&mut ips, &mut st, SEC, &[dgram(A, S, 4000, b"payload")]),
        NONE
    );
    // noalert: the set raises nothing.
    assert_eq!(
        at(&mut ips, &mut st, 2 * SEC, &[dgram(A, S, 4001, b"login")]),
        NONE
    );
    assert_eq!(
        at(
            &mut ips,
            &mut st,
            3 * SEC,
            &[
                dgram(A, S2, 4002, b"payload"),
                dgram(A, S2, 4003, b"XPAY"),
                dgram(B, S, 4004, b"payload"),
            ]
        ),
        vec![2, 3]
    );
    // `dst`: the destination's bit. S has none; A (as a destination) has.
    assert_eq!(
        at(
            &mut ips,
            &mut st,
            4 * SEC,
            &[dgram(S, B, 5000, b"reply"), dgram(S, A, 5001, b"reply")]
        ),
        vec![4]
    );
    // Still set just before 300 s after the set, gone at 300 s.
    assert_eq!(
        at(
            &mut ips,
            &mut st,
            301 * SEC,
            &[dgram(A, S, 4005, b"payload")]
        ),
        vec![2]
    );
    assert_eq!(
        at(
            &mut ips,
            &mut st,
            302 * SEC,
            &[dgram(A, S, 4006, b"payload")]
        ),
        NONE
    );
}

#[test]
fn hostbits_values_suricata_refuses_are_errors() {
    let v = rules::suricata_default_vars();
    for bad in [
        "hostbits:set;",
        "hostbits:set,x,both;",
        "hostbits:set,x,src,3600;",
        "hostbits:set,x,ip_src;",
        "hostbits:jump,x;",
        "hostbits:noalert,x;",
    ] {
        let e = rules::parse_rule(
            &format!("alert udp any any -> any any (content:\"a\"; {bad} sid:1;)"),
            &v,
        )
        .unwrap_err();
        assert!(matches!(e, RuleSyntax::BadValue { .. }), "{bad}: {e:?}");
    }
    assert_eq!(
        rules::parse_rule(
            "drop udp any any -> any any (content:\"a\"; hostbits:isset,x; sid:1;)",
            &v
        )
        .unwrap_err()
        .reason(),
        "keyword xbits or hostbits condition on a drop rule"
    );
}
