//! The IPS over reassembled streams, end to end with the reassembler.

use std::path::Path;

use sluice_ips::{build, Config, Ips};
use sluice_nf::{AlertAction, Ctx, Event, NetworkFunction, Streams};
use sluice_packet::{Batch, PacketPool, Verdict};
use sluice_reassembly::Reassembler;
use sluice_state::{LocalStore, Namespace, SharedLocalStore, StateStore};
use sluice_wire::build::{tcp_v4, udp_v4};
use sluice_wire::parse::parse_frame;
use sluice_wire::tcp::flags::{ACK, PSH, SYN};

const C: [u8; 4] = [10, 0, 0, 1];
const S: [u8; 4] = [192, 168, 1, 2];
const ISN_C: u32 = 1000;
const ISN_S: u32 = 9000;

fn handshake() -> Vec<Vec<u8>> {
    vec![
        tcp_v4(C, S, 40000, 80, ISN_C, 0, SYN, &[]),
        tcp_v4(S, C, 80, 40000, ISN_S, ISN_C + 1, SYN | ACK, &[]),
        tcp_v4(C, S, 40000, 80, ISN_C + 1, ISN_S + 1, ACK, &[]),
    ]
}
fn c(off: u32, p: &[u8]) -> Vec<u8> {
    tcp_v4(C, S, 40000, 80, ISN_C + 1 + off, ISN_S + 1, ACK | PSH, p)
}
fn s(off: u32, p: &[u8]) -> Vec<u8> {
    tcp_v4(S, C, 80, 40000, ISN_S + 1 + off, ISN_C + 1, ACK | PSH, p)
}

fn ips(rules: &[&str]) -> Ips {
    let cfg = Config {
        rule_files: vec![],
        rules: rules.iter().map(|s| s.to_string()).collect(),
        vars: [("HOME_NET".to_string(), "10.0.0.0/8".to_string())].into(),
        idle_timeout_secs: 300,
        sync_progress: false,
        classification_file: None,
        http_body_limit: sluice_ips::http::body::DEFAULT_LIMIT,
        data_dir: None,
        dataset_dirs: vec![],
    };
    let i = build(&cfg, Namespace(2), Path::new(".")).unwrap();
    assert!(i.warnings().is_empty(), "{:?}", i.warnings());
    i
}

struct H {
    r: Reassembler,
    ips: Ips,
    pool: PacketPool,
    streams: Streams,
    ts: u64,
}

/// Per batch: alerts as (sid, action, to_server), and which packets were dropped.
type Res = (Vec<(u32, AlertAction, bool)>, Vec<bool>);

impl H {
    fn new(ips: Ips) -> H {
        H {
            r: Reassembler::new(Namespace(1), Default::default()),
            ips,
            pool: PacketPool::new(64),
            streams: Streams::default(),
            ts: 1_000_000_000,
        }
    }
    fn run(&mut self, st: &mut dyn StateStore, frames: &[Vec<u8>]) -> Res {
        let stamped: Vec<(u64, Vec<u8>)> = frames
            .iter()
            .map(|f| {
                self.ts += 1000;
                (self.ts, f.clone())
            })
            .collect();
        self.run_at(st, &stamped)
    }
    /// One batch of frames with their own times; the batch's time is its
    /// newest packet's.
    fn run_at(&mut self, st: &mut dyn StateStore, frames: &[(u64, Vec<u8>)]) -> Res {
        let mut b = Batch::with_capacity(frames.len());
        for (ts, f) in frames {
            self.ts = self.ts.max(*ts);
            b.push_frame(&mut self.pool, f, *ts, 0);
        }
        for p in &mut b.pkts {
            p.meta = parse_frame(p.data()).unwrap();
        }
        self.r.process(&mut b, st, &mut self.streams, 1).unwrap();
        let mut events = Vec::new();
        let mut emit = Vec::new();
        let mut ctx = Ctx {
            now_ns: self.ts,
            stage: 2,
            streams: &self.streams,
            events: &mut events,
            emit: &mut emit,
        };
        self.ips.process(&mut b, &mut ctx, st).unwrap();
        let dropped = b
            .pkts
            .iter()
            .map(|p| p.verdict != Verdict::Forward)
            .collect();
        b.recycle(&mut self.pool);
        let alerts = events
            .into_iter()
            .map(|e| match e {
                Event::Alert(a) => (a.sid, a.action, a.to_server),
                Event::Flow(_) => panic!("no flow records from the IPS"),
            })
            .collect();
        (alerts, dropped)
    }
    /// Runs every frame as its own batch; returns all alerts.
    fn each(&mut self, st: &mut dyn StateStore, frames: &[Vec<u8>]) -> Res {
        let mut all = (Vec::new(), Vec::new());
        for f in frames {
            let (a, d) = self.run(st, std::slice::from_ref(f));
            all.0.extend(a);
            all.1.extend(d);
        }
        all
    }
}

fn sids(r: &Res) -> Vec<u32> {
    r.0.iter().map(|a| a.0).collect()
}

#[test]
fn signature_split_across_out_of_order_segments_alerts_once_per_occurrence() {
    let rule = r#"alert tcp any any -> any 80 (msg:"evil"; content:"EVILSTRING"; flow:to_server,established; sid:1;)"#;
    for batched in [false, true] {
        let mut st = LocalStore::new();
        let mut h = H::new(ips(&[rule]));
        h.run(&mut st, &handshake());
        // "abcd" "EVILST" "RING and more": the signature spans the last two
        // segments, which arrive before the first.
        let frames = [c(10, b"RING and more"), c(4, b"EVILST"), c(0, b"abcd")];
        let res = if batched {
            h.run(&mut st, &frames)
        } else {
            h.each(&mut st, &frames)
        };
        assert_eq!(
            res.0,
            vec![(1, AlertAction::Allowed, true)],
            "batched {batched}: the packet filling the gap completes the match"
        );
        // The string again later in the flow is a second match, and a packet
        // holding it twice is one alert (Suricata's counting).
        let again = h.run(&mut st, &[c(23, b"EVILSTRING")]);
        assert_eq!(sids(&again), vec![1], "batched {batched}");
        let twice = h.run(&mut st, &[c(33, b"EVILSTRING EVILSTRING")]);
        assert_eq!(sids(&twice), vec![1], "batched {batched}");
        // A retransmission of bytes already scanned is not scanned again.
        let retrans = h.run(&mut st, &[c(23, b"EVILSTRING")]);
        assert!(sids(&retrans).is_empty(), "batched {batched}");
    }
}

#[test]
fn other_direction_does_not_alert() {
    let mut st = LocalStore::new();
    let mut h = H::new(ips(&[
        r#"alert tcp any any -> any any (msg:"x"; content:"secret"; flow:to_server; sid:1;)"#,
        r#"alert tcp any any -> any 80 (msg:"y"; content:"token"; sid:2;)"#,
        r#"alert tcp any any -> any any (msg:"z"; content:"answer"; flow:to_client; sid:3;)"#,
    ]));
    h.run(&mut st, &handshake());
    let r = h.run(&mut st, &[s(0, b"secret token answer")]);
    assert_eq!(r.0, vec![(3, AlertAction::Allowed, false)]);
}

#[test]
fn established_required_but_handshake_incomplete() {
    let rule =
        r#"alert tcp any any -> any any (msg:"x"; content:"attack"; flow:established; sid:1;)"#;
    let mut st = LocalStore::new();
    let mut h = H::new(ips(&[rule]));
    // SYN, then data without any SYN-ACK.
    let r = h.run(&mut st, &[handshake()[0].clone(), c(0, b"attack")]);
    assert!(r.0.is_empty());
    // Same bytes over a completed handshake do alert.
    let mut st = LocalStore::new();
    let mut h = H::new(ips(&[rule]));
    h.run(&mut st, &handshake());
    assert_eq!(sids(&h.run(&mut st, &[c(0, b"attack")])), vec![1]);
}

#[test]
fn drop_rule_blocks_rest_of_flow() {
    let mut st = LocalStore::new();
    let mut h = H::new(ips(&[
        r#"drop tcp any any -> any any (msg:"x"; content:"|de ad be ef|"; sid:9; rev:2;)"#,
    ]));
    h.run(&mut st, &handshake());
    let r = h.run(
        &mut st,
        &[
            c(0, b"ok"),
            c(2, &[1, 0xde, 0xad]),
            c(5, &[0xbe, 0xef]),
            s(0, b"reply"),
        ],
    );
    assert_eq!(r.0, vec![(9, AlertAction::Blocked, true)]);
    assert_eq!(r.1, vec![false, false, true, true]);
    let r = h.run(&mut st, &[c(7, b"more"), s(5, b"x")]);
    assert!(r.0.is_empty());
    assert_eq!(r.1, vec![true, true]);
}

#[test]
fn pass_rule_stops_inspection() {
    let mut st = LocalStore::new();
    let mut h = H::new(ips(&[
        r#"pass tcp any any -> any any (msg:"p"; content:"trusted"; sid:1;)"#,
        r#"alert tcp any any -> any any (msg:"a"; content:"bad"; sid:2;)"#,
    ]));
    h.run(&mut st, &handshake());
    let r = h.each(&mut st, &[c(0, b"trusted "), c(8, b"bad")]);
    assert!(r.0.is_empty() && r.1.iter().all(|d| !d));
}

#[test]
fn nocase_offset_depth() {
    let mut st = LocalStore::new();
    let mut h = H::new(ips(&[
        r#"alert tcp any any -> any any (msg:"a"; content:"get"; nocase; offset:0; depth:3; sid:1;)"#,
        r#"alert tcp any any -> any any (msg:"b"; content:"Host"; sid:2;)"#,
        r#"alert tcp any any -> any any (msg:"c"; content:"xyz"; offset:10; sid:3;)"#,
        r#"alert tcp any any -> any any (msg:"d"; content:"abc"; depth:5; sid:4;)"#,
    ]));
    h.run(&mut st, &handshake());
    // "GET" at 0 (nocase), "host" lowercase (case-sensitive rule misses),
    // "xyz" at 4 (before offset 10) and again at 12; "abc" ends at 9 > depth 5.
    let r = h.each(&mut st, &[c(0, b"GETxxyzabc"), c(10, b"h xyz host")]);
    let mut got = sids(&r);
    got.sort();
    assert_eq!(got, vec![1, 3]);
}

#[test]
fn distance_within_across_packets() {
    let rule = r#"alert tcp any any -> any any (msg:"a"; content:"USER"; content:"root"; distance:1; within:10; sid:1;)"#;
    let cases: Vec<(Vec<&[u8]>, bool)> = vec![
        (vec![b"USER ", b"root"], true),
        (vec![b"USERroot"], false),           // distance 1 not met
        (vec![b"USER          root"], false), // beyond within
        (vec![b"root USER x"], false),        // wrong order
        (vec![b"USER xxxxxxxxxxxx USER", b" root"], true), // re-anchored
    ];
    for (parts, want) in cases {
        let mut st = LocalStore::new();
        let mut h = H::new(ips(&[rule]));
        h.run(&mut st, &handshake());
        let mut off = 0;
        let frames: Vec<Vec<u8>> = parts
            .iter()
            .map(|p| {
                let f = c(off, p);
                off += p.len() as u32;
                f
            })
            .collect();
        let r = h.each(&mut st, &frames);
        assert_eq!(!r.0.is_empty(), want, "{parts:?}");
    }
}

#[test]
fn addresses_negation_and_bidirectional() {
    let mut st = LocalStore::new();
    let mut h = H::new(ips(&[
        r#"alert tcp !$HOME_NET any -> any any (msg:"a"; content:"A1"; sid:1;)"#,
        r#"alert tcp $HOME_NET !80 -> any any (msg:"b"; content:"B2"; sid:2;)"#,
        r#"alert tcp $HOME_NET any -> any ![443,8000:9000] (msg:"c"; content:"C3"; sid:3;)"#,
        r#"alert tcp 192.168.1.0/24 80 <> 10.0.0.1 any (msg:"d"; content:"D4"; sid:4;)"#,
        r#"alert tcp 192.168.1.0/24 80 -> 10.0.0.1 any (msg:"e"; content:"E5"; sid:5;)"#,
    ]));
    h.run(&mut st, &handshake());
    // Client 10.0.0.1:40000 -> 192.168.1.2:80.
    let r = h.run(&mut st, &[c(0, b"A1 B2 C3 D4 E5")]);
    let mut got = sids(&r);
    got.sort();
    assert_eq!(got, vec![2, 3, 4]);
}

#[test]
fn udp_datagrams_match_per_payload() {
    let mut st = LocalStore::new();
    let mut h = H::new(ips(&[
        r#"alert udp any any -> any 53 (msg:"dns"; content:"|07|example"; offset:12; sid:1;)"#,
        r#"drop udp any any -> any 53 (msg:"bad"; content:"evil"; sid:2;)"#,
    ]));
    let mut q = vec![0u8; 12];
    q.extend_from_slice(b"\x07example\x03com\x00");
    let r = h.run(
        &mut st,
        &[
            udp_v4(C, S, 5555, 53, &q),
            udp_v4(C, S, 5555, 53, b"\x07example at offset 0"),
            udp_v4(C, S, 5556, 53, b"evil"),
            udp_v4(C, S, 5556, 53, b"fine"),
        ],
    );
    assert_eq!(
        r.0,
        vec![
            (1, AlertAction::Allowed, true),
            (2, AlertAction::Blocked, true)
        ]
    );
    assert_eq!(r.1, vec![false, false, true, true]);
}

#[test]
fn udp_pass_rule_stops_inspection_of_the_flow() {
    let mut st = LocalStore::new();
    let mut h = H::new(ips(&[
        r#"pass udp any any -> any any (msg:"p"; content:"hello"; sid:1;)"#,
        r#"alert udp any any -> any any (msg:"a"; content:"bad"; sid:2;)"#,
    ]));
    let r = h.run(
        &mut st,
        &[
            udp_v4(C, S, 7000, 9, b"bad"),
            udp_v4(C, S, 7000, 9, b"hello"),
            udp_v4(C, S, 7000, 9, b"bad"),
            udp_v4(C, S, 7001, 9, b"bad"),
        ],
    );
    // Alerts for the first datagram and for the other flow only.
    assert_eq!(r.0.len(), 2);
    assert!(r.1.iter().all(|d| !d));
}

#[test]
fn bad_rules_are_reported_and_skipped() {
    let dir = std::env::temp_dir().join(format!("sluice-ips-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("t.rules"),
        "# header\nalert tcp any any -> any any (msg:\"ok\"; content:\"a\"; sid:1;)\nalert tcp any any -> any any (msg:\"x\"; content:\"a\"; pcre:\"/a;b/\"; lua:x.lua; sid:2;)\nalert tcp any any - any any (msg:\"x\"; content:\"a\"; sid:3;)\nalert tcp $NOPE any -> any any (content:\"a\"; sid:4;)\n",
    )
    .unwrap();
    let cfg: Config = Config {
        rule_files: vec!["t.rules".into()],
        rules: vec![],
        vars: Default::default(),
        idle_timeout_secs: 300,
        sync_progress: false,
        classification_file: None,
        http_body_limit: sluice_ips::http::body::DEFAULT_LIMIT,
        data_dir: None,
        dataset_dirs: vec![],
    };
    let i = build(&cfg, Namespace(2), &dir).unwrap();
    let w: Vec<String> = i.warnings().iter().map(|e| e.to_string()).collect();
    assert_eq!(
        w,
        vec![
            "t.rules:3: unsupported keyword \"lua\"",
            "t.rules:4: unknown direction \"-\"",
            "t.rules:5: unknown variable \"$NOPE\"",
        ]
    );
    assert_eq!(i.rule_count(), 1);
    let mut cs = Vec::new();
    i.counters(&mut cs);
    assert!(cs.contains(&("ips_rules_skipped", 3)));
    let missing = Config {
        rule_files: vec!["nope.rules".into()],
        ..cfg
    };
    assert!(build(&missing, Namespace(2), &dir).is_err());
    // A file of nothing but garbage leaves no rule at all: refused, not an IPS
    // that inspects nothing while looking configured.
    std::fs::write(dir.join("garbage.rules"), "GIF89a\x01\x02\nnot a rule\n").unwrap();
    let garbage = Config {
        rule_files: vec!["garbage.rules".into()],
        ..missing
    };
    match build(&garbage, Namespace(2), &dir) {
        Err(e @ sluice_ips::ConfigError::NoUsableRule { refused: 2, .. }) => {
            assert!(e.to_string().contains("garbage.rules:1:"), "{e}")
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("an IPS with no usable rule was built"),
    }
    // No rule at all, and nothing refused (e.g. only comments): a valid, empty IPS.
    std::fs::write(dir.join("empty.rules"), "# nothing yet\n").unwrap();
    let empty = Config {
        rule_files: vec!["empty.rules".into()],
        ..garbage
    };
    assert_eq!(build(&empty, Namespace(2), &dir).unwrap().rule_count(), 0);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn two_instances_on_shared_store_alert_like_one() {
    let rules = [
        r#"alert tcp any any -> any any (msg:"a"; content:"MALWARE"; sid:1;)"#,
        r#"alert tcp any any -> any any (msg:"b"; content:"login"; nocase; content:"admin"; distance:0; within:20; sid:2;)"#,
        r#"drop tcp any any -> any any (msg:"c"; content:"rm -rf"; flow:to_client; sid:3;)"#,
    ];
    let mut frames = handshake();
    let cdata = b"xxMALWxxLOGIN as admin, MALWARE!";
    let sdata = b"ok then rm -rf / and more";
    for (i, chunk) in cdata.chunks(5).enumerate().rev() {
        frames.push(c(i as u32 * 5, chunk));
    }
    for (i, chunk) in sdata.chunks(4).enumerate() {
        frames.push(s(i as u32 * 4, chunk));
    }
    let batches: Vec<&[Vec<u8>]> = frames.chunks(3).collect();

    let mut st = LocalStore::new();
    let mut one = H::new(ips(&rules));
    let single: Vec<Res> = batches.iter().map(|b| one.run(&mut st, b)).collect();

    let shared = SharedLocalStore::new();
    let (mut s1, mut s2) = (shared.handle(), shared.handle());
    let mut a = H::new(ips(&rules));
    let mut b = H::new(ips(&rules));
    let two: Vec<Res> = batches
        .iter()
        .enumerate()
        .map(|(i, fr)| {
            if i % 2 == 0 {
                a.run(&mut s1, fr)
            } else {
                b.run(&mut s2, fr)
            }
        })
        .collect();
    assert_eq!(single, two);
    let all: Vec<u32> = single.iter().flat_map(sids).collect();
    assert_eq!(all, vec![2, 1, 3]);
}

#[test]
fn raw_scan_counts_matches() {
    let i = ips(&[
        r#"alert tcp any any -> any any (msg:"a"; content:"abc"; sid:1;)"#,
        r#"alert tcp any any -> any any (msg:"b"; content:"XY"; nocase; sid:2;)"#,
    ]);
    assert_eq!(i.raw_scan_bytes(b"abcabc xy XY"), 4);
}

#[test]
fn corrupt_state_fails_closed_and_timers_expire_records() {
    let rule = r#"alert tcp any any -> any any (msg:"a"; content:"zzz"; sid:1;)"#;
    let mut st = LocalStore::new();
    let mut h = H::new(ips(&[rule]));
    h.run(&mut st, &handshake());
    h.run(&mut st, &[c(0, b"zz")]);
    let (canon, _) = parse_frame(&c(0, b"")).unwrap().flow.canonical();
    let key = sluice_state::Key::flow(Namespace(2), sluice_ips::TABLE_FLOW, &canon, &[]);
    let mut ops = sluice_state::Ops::new();
    let good = ops.get(key);
    st.execute(&mut ops).unwrap();
    let mut bad = ops.value(good).unwrap().to_vec();
    bad[10] ^= 0x55; // the stored DFA state: no longer a state of the automaton
    let mut ops = sluice_state::Ops::new();
    ops.put(key, &bad);
    st.execute(&mut ops).unwrap();
    let r = h.run(&mut st, &[c(2, b"z")]);
    assert_eq!(r, (vec![], vec![true]));
    let mut cs = Vec::new();
    h.ips.counters(&mut cs);
    assert!(cs.contains(&("ips_corrupt_records", 1)));

    // Idle records are deleted by the timer (the corrupt one included).
    let mut events = Vec::new();
    let mut emit = Vec::new();
    let streams = Streams::default();
    let mut ctx = Ctx {
        now_ns: h.ts + 301 * 1_000_000_000,
        stage: 2,
        streams: &streams,
        events: &mut events,
        emit: &mut emit,
    };
    h.ips.on_timers(&mut ctx, &mut st).unwrap();
    let mut ops = sluice_state::Ops::new();
    let id = ops.get(key);
    st.execute(&mut ops).unwrap();
    assert!(ops.value(id).is_none());
}

/// Many flows in one batch are scanned interleaved (several streams in lockstep);
/// the alerts, their directions and the drops must be exactly those of scanning each
/// packet alone, one batch per packet.
#[test]
fn interleaved_scanning_matches_packet_at_a_time() {
    let rules = [
        r#"alert tcp any any -> any 80 (msg:"a"; content:"EVILPAYLOAD"; sid:1;)"#,
        r#"drop tcp any any -> any 80 (msg:"b"; content:"dropme"; nocase; sid:2;)"#,
        r#"alert tcp any 80 -> any any (msg:"c"; content:"SERVERSIDE"; sid:3;)"#,
        r#"alert tcp any any -> any 80 (msg:"d"; content:"first"; content:"second"; distance:0; within:40; sid:4;)"#,
    ];
    // Twelve flows; each carries its signature at a different place, split across
    // segments, with out-of-order and retransmitted segments in some.
    let mut frames = Vec::new();
    let mut per_flow: Vec<Vec<Vec<u8>>> = Vec::new();
    for f in 0..12u32 {
        let port = 41000 + f as u16;
        let cl = [10, 0, 1, f as u8 + 1];
        let isn_c = 5000 * (f + 1);
        let isn_s = 70000 * (f + 1);
        let cs =
            |off: u32, p: &[u8], fl| tcp_v4(cl, S, port, 80, isn_c + 1 + off, isn_s + 1, fl, p);
        let sc =
            |off: u32, p: &[u8]| tcp_v4(S, cl, 80, port, isn_s + 1 + off, isn_c + 1, ACK | PSH, p);
        let body = match f % 4 {
            0 => b"xxxxxxxxEVILPAY".to_vec(),
            1 => b"yyyyDrOpMe and more".to_vec(),
            2 => b"first then some filler second".to_vec(),
            _ => b"nothing to see here at all...".to_vec(),
        };
        let tail: &[u8] = match f % 4 {
            0 => b"LOAD and the rest",
            _ => b" harmless tail",
        };
        let mut pk = vec![
            tcp_v4(cl, S, port, 80, isn_c, 0, SYN, &[]),
            tcp_v4(S, cl, 80, port, isn_s, isn_c + 1, SYN | ACK, &[]),
            tcp_v4(cl, S, port, 80, isn_c + 1, isn_s + 1, ACK, &[]),
        ];
        let a = cs(0, &body, ACK | PSH);
        let b = cs(body.len() as u32, tail, ACK | PSH);
        if f % 3 == 0 {
            pk.push(b.clone());
            pk.push(a.clone());
        } else {
            pk.push(a.clone());
            pk.push(a.clone()); // retransmission
            pk.push(b);
        }
        pk.push(sc(0, b"HTTP/1.1 200 OK SERVERSIDE marker"));
        per_flow.push(pk);
    }
    // Interleave the flows packet by packet.
    let longest = per_flow.iter().map(|v| v.len()).max().unwrap();
    for k in 0..longest {
        for fl in &per_flow {
            if let Some(p) = fl.get(k) {
                frames.push(p.clone());
            }
        }
    }
    let run = |batch: usize| {
        let mut st = LocalStore::new();
        let mut h = H::new(ips(&rules));
        let mut alerts = Vec::new();
        let mut drops = Vec::new();
        for b in frames.chunks(batch) {
            let (a, d) = h.run(&mut st, b);
            alerts.extend(a);
            drops.extend(d);
        }

        (alerts, drops)
    };
    let one = run(1);
    assert!(
        one.0.len() >= 9,
        "the trace must exercise the rules: {:?}",
        one.0
    );
    assert!(one.1.iter().any(|&d| d), "and a drop rule");
    for batch in [7, 32, 64] {
        assert_eq!(run(batch), one, "batch of {batch}");
    }
}

#[test]
fn a_resynchronised_stream_restarts_the_automata_at_the_gap() {
    // Bytes 8..16 passed another instance whose progress was lost; the server
    // acknowledging them makes the reassembler skip them. A signature begun
    // before the gap must not complete across it; one wholly after it matches;
    // a rule that fired before the gap fires again on a new occurrence (alerts
    // per match, as Suricata counts them).
    let rules = [
        r#"alert tcp any any -> any 80 (msg:"split"; content:"ABCDEFGH"; sid:1;)"#,
        r#"alert tcp any any -> any 80 (msg:"after"; content:"WXYZ"; sid:2;)"#,
        r#"alert tcp any any -> any 80 (msg:"early"; content:"abc"; sid:3;)"#,
    ];
    let mut st = LocalStore::new();
    let mut h = H::new(ips(&rules));
    h.run(&mut st, &handshake());
    let before = h.run(&mut st, &[c(0, b"abc..ABC")]);
    assert_eq!(sids(&before), vec![3]);
    // Offsets 8..16 never arrive here; 16.. is buffered behind the gap.
    let buffered = h.run(&mut st, &[c(16, b"DEFGH___")]);
    assert!(sids(&buffered).is_empty());
    let ack = tcp_v4(S, C, 80, 40000, ISN_S + 1, ISN_C + 1 + 24, ACK, &[]);
    h.run(&mut st, &[ack]);
    let after = h.run(&mut st, &[c(24, b"abc WXYZ")]);
    // "ABC" + "DEFGH" would complete sid 1 without the reset; sid 3 fires
    // again on its second occurrence.
    let mut got = sids(&after);
    got.sort_unstable();
    assert_eq!(got, vec![2, 3]);
    assert!(after.1.iter().all(|d| !d));
}

#[test]
fn idleness_is_judged_at_each_packets_own_time() {
    // IPS timeout 300 s; the reassembler keeps the stream far longer, so only
    // the IPS's own state can expire. A signature split across a pause.
    const SEC: u64 = 1_000_000_000;
    let rule = r#"alert tcp any any -> any 80 (msg:"x"; content:"/etc/passwd"; sid:7; rev:1;)"#;
    let t0 = 1_000 * SEC;
    let mut results = Vec::new();
    for (pause, later) in [(300 * SEC - 1, 100 * SEC), (300 * SEC, 0)] {
        let mut st = LocalStore::new();
        let mut h = H::new(ips(&[rule]));
        h.r = Reassembler::new(
            Namespace(1),
            sluice_reassembly::Config {
                idle_timeout_secs: 10_000,
                ..Default::default()
            },
        );
        let mut first: Vec<(u64, Vec<u8>)> = handshake()
            .into_iter()
            .enumerate()
            .map(|(i, f)| (t0 + i as u64, f))
            .collect();
        first.push((t0 + 3, c(0, b"GET /etc/pa")));
        assert!(h.run_at(&mut st, &first).0.is_empty());
        // One batch: the rest of the signature after the pause, and a later
        // packet that makes the batch's time far past the timeout.
        let mut second = vec![(t0 + 3 + pause, c(11, b"sswd HTTP/1.0"))];
        if later > 0 {
            second.push((t0 + 3 + pause + later, s(0, b"HTTP/1.0 200 OK")));
        }
        results.push(sids(&h.run_at(&mut st, &second)));
    }
    // Just below the timeout the flow goes on and the signature completes;
    // at the timeout its scan state is gone, as if its timer had run.
    assert_eq!(results, vec![vec![7], vec![]]);
}

#[test]
fn fast_open_data_is_inspected() {
    // An exploit in a SYN (TCP Fast Open reaches the server's application
    // with the connection) and one resent after the server refused the SYN's
    // data (which was different: first wins must not hide the resent bytes).
    let rule = r#"drop tcp any any -> any 80 (msg:"evil"; flow:established,to_server; content:"EVIL"; sid:1;)"#;
    let mut st = LocalStore::new();
    let mut h = H::new(ips(&[rule]));
    let syn = h.run(
        &mut st,
        &[tcp_v4(C, S, 40000, 80, ISN_C, 0, SYN, b"..EVIL..")],
    );
    assert_eq!(sids(&syn), vec![1]);
    assert_eq!(syn.1, vec![true], "the SYN itself is dropped");

    let mut st = LocalStore::new();
    let mut h = H::new(ips(&[rule]));
    let o = h.each(
        &mut st,
        &[
            tcp_v4(C, S, 40000, 80, ISN_C, 0, SYN, b"harmless"),
            tcp_v4(S, C, 80, 40000, ISN_S, ISN_C + 1, SYN | ACK, &[]),
            tcp_v4(C, S, 40000, 80, ISN_C + 1, ISN_S + 1, ACK, &[]),
            c(0, b"EVILDATA"),
        ],
    );
    assert_eq!(sids(&o), vec![1]);
    assert_eq!(o.1, vec![false, false, false, true]);
}

#[test]
fn payload_outside_a_tracked_stream_is_matched_on_its_own() {
    // No SYN was seen and the reassembler does not pick streams up
    // mid-stream: each segment's payload is still matched, as a datagram's,
    // except by rules that need an established connection.
    let rules = [
        r#"alert tcp any any -> any 80 (msg:"any"; content:"EVIL"; sid:1;)"#,
        r#"alert tcp any any -> any 80 (msg:"est"; flow:established,to_server; content:"EVIL"; sid:2;)"#,
        r#"alert tcp any any -> any 80 (msg:"split"; content:"SPLITSIG"; sid:3;)"#,
    ];
    let mut st = LocalStore::new();
    let mut h = H::new(ips(&rules));
    let o = h.each(&mut st, &[c(0, b"..EVIL.."), c(8, b"SPLIT"), c(13, b"SIG")]);
    assert_eq!(sids(&o), vec![1]);
    assert_eq!(h.ips.stats().tcp_unreassembled, 3);
}
