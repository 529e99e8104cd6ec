//! Flow records from the monitor: counts, close, timeout, flush.

use std::path::Path;

use sluice_monitor::{build, Config, Monitor};
use sluice_nf::{Ctx, Event, FlowRecord, NetworkFunction, Streams};
use sluice_packet::{Batch, PacketPool};
use sluice_state::{LocalStore, Namespace, SharedLocalStore, StateStore};
use sluice_wire::build::{tcp_v4, udp_v4};
use sluice_wire::parse::parse_frame;
use sluice_wire::tcp::flags::{ACK, FIN, PSH, RST, SYN};

const A: [u8; 4] = [10, 0, 0, 9];
const B: [u8; 4] = [10, 0, 0, 1];
const SEC: u64 = 1_000_000_000;

struct H {
    m: Monitor,
    pool: PacketPool,
    streams: Streams,
}

impl H {
    fn new() -> H {
        H {
            m: build(
                &Config {
                    idle_timeout_secs: 10,
                    close_linger_ms: 2000,
                },
                Namespace(5),
                Path::new("."),
            )
            .unwrap(),
            pool: PacketPool::new(64),
            streams: Streams::default(),
        }
    }
    fn run(&mut self, st: &mut dyn StateStore, frames: &[(u64, Vec<u8>)]) -> Vec<FlowRecord> {
        let mut b = Batch::with_capacity(frames.len());
        for (ts, f) in frames {
            b.push_frame(&mut self.pool, f, *ts, 0);
        }
        for p in &mut b.pkts {
            p.meta = parse_frame(p.data()).unwrap();
        }
        let now = frames.iter().map(|f| f.0).max().unwrap_or(0);
        let mut events = Vec::new();
        let mut emit = Vec::new();
        let mut ctx = Ctx {
            now_ns: now,
            stage: 0,
            streams: &self.streams,
            events: &mut events,
            emit: &mut emit,
        };
        self.m.process(&mut b, &mut ctx, st).unwrap();
        b.recycle(&mut self.pool);
        flows(events)
    }
    fn timers(&mut self, st: &mut dyn StateStore, now: u64) -> Vec<FlowRecord> {
        let mut events = Vec::new();
        let mut emit = Vec::new();
        let mut ctx = Ctx {
            now_ns: now,
            stage: 0,
            streams: &self.streams,
            events: &mut events,
            emit: &mut emit,
        };
        self.m.on_timers(&mut ctx, st).unwrap();
        flows(events)
    }
    fn flush(&mut self, st: &mut dyn StateStore, now: u64) -> Vec<FlowRecord> {
        let mut events = Vec::new();
        let mut emit = Vec::new();
        let mut ctx = Ctx {
            now_ns: now,
            stage: 0,
            streams: &self.streams,
            events: &mut events,
            emit: &mut emit,
        };
        self.m.flush(&mut ctx, st).unwrap();
        flows(events)
    }
}

fn flows(ev: Vec<Event>) -> Vec<FlowRecord> {
    ev.into_iter()
        .map(|e| match e {
            Event::Flow(f) => f,
            Event::Alert(_) => panic!("no alerts from the monitor"),
        })
        .collect()
}

/// A TCP conversation A:5000 -> B:80 with timestamps, ending in FIN/FIN/ACK, and a
/// stray ACK long after it closed.
fn tcp_trace() -> Vec<(u64, Vec<u8>)> {
    let c = |f, p: &[u8]| tcp_v4(A, B, 5000, 80, 1, 1, f, p);
    let s = |f, p: &[u8]| tcp_v4(B, A, 80, 5000, 1, 1, f, p);
    vec![
        (10 * SEC, c(SYN, &[])),
        (10 * SEC + 1, s(SYN | ACK, &[])),
        (10 * SEC + 2, c(ACK, &[])),
        (10 * SEC + 3, c(ACK | PSH, b"GET / HTTP/1.0\r\n\r\n")),
        (10 * SEC + 4, s(ACK | PSH, &[b'x'; 700])),
        (11 * SEC, c(FIN | ACK, &[])),
        (12 * SEC, s(FIN | ACK, &[])),
        (12 * SEC + 5, c(ACK, &[])), // the last ACK, within the linger: counted
        (15 * SEC, c(ACK, &[])),     // after the linger: absorbed
    ]
}

fn expected_counts(trace: &[(u64, Vec<u8>)], upto: usize) -> (u64, u64, u64, u64) {
    let mut r = (0, 0, 0, 0);
    for (_, f) in &trace[..upto] {
        let m = parse_frame(f).unwrap();
        if m.flow.src_port == 5000 {
            r.0 += 1;
            r.2 += f.len() as u64;
        } else {
            r.1 += 1;
            r.3 += f.len() as u64;
        }
    }
    r
}

#[test]
fn tcp_close_exports_exact_counts_once() {
    let trace = tcp_trace();
    for batch in [1, 3, 8] {
        let mut st = LocalStore::new();
        let mut h = H::new();
        let mut out = Vec::new();
        for b in trace.chunks(batch) {
            out.extend(h.run(&mut st, b));
        }
        out.extend(h.timers(&mut st, 100 * SEC));
        out.extend(h.flush(&mut st, 100 * SEC));
        assert_eq!(out.len(), 1, "batch {batch}: {out:?}");
        let r = &out[0];
        assert_eq!(r.reason, "tcp_close");
        assert_eq!(r.state, "closed");
        assert_eq!(
            (
                r.pkts_toserver,
                r.pkts_toclient,
                r.bytes_toserver,
                r.bytes_toclient
            ),
            expected_counts(&trace, 8)
        );
        assert_eq!((r.start_ns, r.end_ns), (10 * SEC, 12 * SEC + 5));
        assert_eq!(r.flow.src_port, 5000, "to_server is the first sender");
        assert_eq!(st.len(), 0, "tombstone expired");
    }
}

#[test]
fn rst_closes() {
    let mut st = LocalStore::new();
    let mut h = H::new();
    let out = h.run(
        &mut st,
        &[
            (SEC, tcp_v4(A, B, 1, 2, 0, 0, SYN, &[])),
            (2 * SEC, tcp_v4(B, A, 2, 1, 0, 1, RST | ACK, &[])),
        ],
    );
    assert!(
        out.is_empty(),
        "exported when the linger ends, not at the RST"
    );
    assert!(h.timers(&mut st, 3 * SEC).is_empty(), "still lingering");
    let out = h.timers(&mut st, 5 * SEC);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].reason, "tcp_close");
    assert_eq!((out[0].pkts_toserver, out[0].pkts_toclient), (1, 1));
    assert!(h.flush(&mut st, 6 * SEC).is_empty());
}

#[test]
fn timeout_exports_once_and_new_flow_follows() {
    let mut st = LocalStore::new();
    let mut h = H::new();
    let u = |p: &[u8]| udp_v4(B, A, 53, 4000, p);
    // First packet from B: B is the "client" of this flow.
    h.run(
        &mut st,
        &[(SEC, u(b"a")), (2 * SEC, udp_v4(A, B, 4000, 53, b"bb"))],
    );
    h.run(&mut st, &[(5 * SEC, u(b"ccc"))]);
    assert!(
        h.timers(&mut st, 11 * SEC).is_empty(),
        "refreshed, re-armed"
    );
    let out = h.timers(&mut st, 16 * SEC);
    assert_eq!(out.len(), 1);
    let r = &out[0];
    assert_eq!(r.reason, "timeout");
    assert_eq!(r.state, "established");
    assert_eq!(r.flow.src, sluice_wire::IpAddr::V4(B));
    assert_eq!((r.pkts_toserver, r.pkts_toclient), (2, 1));
    assert_eq!((r.start_ns, r.end_ns), (SEC, 5 * SEC));
    assert!(h.timers(&mut st, 100 * SEC).is_empty());
    assert!(h.flush(&mut st, 100 * SEC).is_empty(), "exactly once");
    assert_eq!(st.len(), 0);
}

#[test]
fn idle_record_is_exported_by_the_next_packet_if_timer_did_not_run() {
    let mut st = LocalStore::new();
    let mut h = H::new();
    let u = || udp_v4(A, B, 4000, 53, b"x");
    h.run(&mut st, &[(SEC, u())]);
    let out = h.run(&mut st, &[(50 * SEC, u())]);
    assert_eq!(out.len(), 1);
    assert_eq!(
        (out[0].reason, out[0].pkts_toserver, out[0].end_ns),
        ("timeout", 1, SEC)
    );
    // The timer of the old flow finds the new one alive and only re-arms.
    assert!(h.timers(&mut st, 55 * SEC).is_empty());
    let out = h.flush(&mut st, 55 * SEC);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].reason, out[0].start_ns), ("shutdown", 50 * SEC));
}

#[test]
fn flush_exports_open_flows_once() {
    let mut st = LocalStore::new();
    let mut h = H::new();
    let trace = tcp_trace();
    h.run(&mut st, &trace[..5]);
    h.run(&mut st, &[(3 * SEC, udp_v4(A, B, 1, 2, b"q"))]);
    let mut out = h.flush(&mut st, 10 * SEC + 10);
    out.sort_by_key(|r| r.flow.proto);
    assert_eq!(out.len(), 2);
    assert!(out.iter().all(|r| r.reason == "shutdown"));
    assert_eq!(
        (
            out[0].pkts_toserver,
            out[0].pkts_toclient,
            out[0].bytes_toserver,
            out[0].bytes_toclient
        ),
        expected_counts(&trace, 5)
    );
    assert_eq!(out[1].state, "new");
    assert!(h.flush(&mut st, 10 * SEC + 10).is_empty());
    assert!(h.timers(&mut st, 1000 * SEC).is_empty(), "timers cancelled");
}

#[test]
fn two_instances_count_like_one() {
    let trace = tcp_trace();
    let shared = SharedLocalStore::new();
    let (mut s1, mut s2) = (shared.handle(), shared.handle());
    let mut a = H::new();
    let mut b = H::new();
    let mut out = Vec::new();
    for (i, f) in trace.chunks(2).enumerate() {
        out.extend(if i % 2 == 0 {
            a.run(&mut s1, f)
        } else {
            b.run(&mut s2, f)
        });
    }
    assert_eq!(out.len(), 1);
    assert_eq!(
        (
            out[0].pkts_toserver,
            out[0].pkts_toclient,
            out[0].bytes_toserver,
            out[0].bytes_toclient
        ),
        expected_counts(&trace, 8)
    );
    // Instance a created the flow; b exported it; a's flush skips it.
    assert!(a.flush(&mut s1, 100 * SEC).is_empty());
}

#[test]
fn zero_timeout_is_rejected() {
    let e = build(
        &Config {
            idle_timeout_secs: 0,
            close_linger_ms: 2000,
        },
        Namespace(1),
        Path::new("."),
    )
    .err();
    assert_eq!(
        e.map(|e| e.to_string()).as_deref(),
        Some("monitor: idle_timeout_secs must be at least 1")
    );
}

/// (reason, packets both ways, start, end) of each record, sorted.
fn summary(mut v: Vec<FlowRecord>) -> Vec<(&'static str, u64, u64, u64, u64)> {
    let mut out: Vec<_> = v
        .drain(..)
        .map(|r| {
            (
                r.reason,
                r.pkts_toserver,
                r.pkts_toclient,
                r.start_ns,
                r.end_ns,
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn idleness_is_judged_at_each_packets_own_time_with_the_timers_boundary() {
    // Idle timeout 10 s. One batch whose time (its newest packet) is far past
    // the first packet's timeout: only the pause a packet itself sees splits.
    let u = || udp_v4(A, B, 4000, 53, b"x");
    let mut st = LocalStore::new();
    let mut h = H::new();
    let out = h.run(
        &mut st,
        &[
            (SEC, u()),
            (SEC + 10 * SEC - 1, u()),     // just below: same flow
            (SEC + 20 * SEC - 1, u()),     // exactly the timeout after: expired
            (SEC + 20 * SEC - 1 + 5, u()), // the new flow goes on
        ],
    );
    assert_eq!(summary(out), vec![("timeout", 2, 0, SEC, 11 * SEC - 1)]);
    let out = h.flush(&mut st, 21 * SEC);
    assert_eq!(
        summary(out),
        vec![("shutdown", 2, 0, 21 * SEC - 1, 21 * SEC + 4)]
    );

    // The same packets, one per batch, with the timers run at every packet's
    // time first (as a chain with batches of one does): the same records.
    let mut st = LocalStore::new();
    let mut h = H::new();
    let mut all = Vec::new();
    for t in [SEC, 11 * SEC - 1, 21 * SEC - 1, 21 * SEC + 4] {
        all.extend(h.timers(&mut st, t));
        all.extend(h.run(&mut st, &[(t, u())]));
    }
    assert_eq!(summary(all), vec![("timeout", 2, 0, SEC, 11 * SEC - 1)]);
}

#[test]
fn a_timer_at_the_deadline_and_a_packet_at_the_deadline_agree() {
    let u = || udp_v4(A, B, 4000, 53, b"x");
    // Timer one nanosecond before the deadline: nothing; at it: exported.
    let mut st = LocalStore::new();
    let mut h = H::new();
    h.run(&mut st, &[(SEC, u())]);
    assert!(h.timers(&mut st, 11 * SEC - 1).is_empty());
    assert_eq!(summary(h.timers(&mut st, 11 * SEC)).len(), 1);
    // A packet at the deadline without the timer: the same export.
    let mut st2 = LocalStore::new();
    let mut h2 = H::new();
    h2.run(&mut st2, &[(SEC, u())]);
    let out = h2.run(&mut st2, &[(11 * SEC, u())]);
    assert_eq!(summary(out), vec![("timeout", 1, 0, SEC, SEC)]);
}

#[test]
fn a_close_exported_by_its_timer_leaves_the_same_tombstone_as_by_a_packet() {
    // FIN both ways, then a stray ACK after the linger (2 s): absorbed
    // whether the linger's timer ran before it or not.
    let c = |f| tcp_v4(A, B, 5000, 80, 1, 1, f, &[]);
    let s = |f| tcp_v4(B, A, 80, 5000, 1, 1, f, &[]);
    let close = [
        (SEC, c(SYN)),
        (SEC + 1, s(SYN | ACK)),
        (SEC + 2, c(FIN | ACK)),
        (SEC + 3, s(FIN | ACK)),
    ];
    let stray = (SEC + 3 + 2 * SEC, c(ACK)); // exactly at the linger's end
    let mut results = Vec::new();
    for timer_first in [false, true] {
        let mut st = LocalStore::new();
        let mut h = H::new();
        let mut all = h.run(&mut st, &close);
        if timer_first {
            all.extend(h.timers(&mut st, stray.0));
        }
        all.extend(h.run(&mut st, std::slice::from_ref(&stray)));
        all.extend(h.flush(&mut st, stray.0 + 1));
        assert_eq!(h.m.stats().after_close, 1, "timer first: {timer_first}");
        results.push(summary(all));
    }
    assert_eq!(results[0], vec![("tcp_close", 2, 2, SEC, SEC + 3)]);
    assert_eq!(results[0], results[1]);
}
