//! Behaviour of the reassembler over a local and a shared store.

use proptest::prelude::*;
use sluice_packet::{Batch, PacketPool, Verdict};
use sluice_reassembly::{Config, Reassembler, Streams};
use sluice_state::{LocalStore, Namespace, SharedLocalStore, StateStore};
use sluice_wire::build::tcp_v4;
use sluice_wire::parse::parse_frame;
use sluice_wire::rewrite::verify_all_checksums;
use sluice_wire::tcp::flags::{ACK, FIN, PSH, RST, SYN};

const C: [u8; 4] = [10, 0, 0, 1];
const S: [u8; 4] = [10, 0, 0, 2];
const ISN_C: u32 = 100;
const ISN_S: u32 = 5000;

/// A frame of the test connection; `to_server` picks the direction.
fn seg(to_server: bool, seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    if to_server {
        tcp_v4(C, S, 1000, 80, seq, ISN_S + 1, flags, payload)
    } else {
        tcp_v4(S, C, 80, 1000, seq, ISN_C + 1, flags, payload)
    }
}

/// Client data at stream offset `off`.
fn cdata(off: u32, payload: &[u8]) -> Vec<u8> {
    seg(true, ISN_C + 1 + off, ACK | PSH, payload)
}

/// Server data at stream offset `off`.
fn sdata(off: u32, payload: &[u8]) -> Vec<u8> {
    seg(false, ISN_S + 1 + off, ACK | PSH, payload)
}

fn handshake() -> Vec<Vec<u8>> {
    vec![
        seg(true, ISN_C, SYN, &[]),
        tcp_v4(S, C, 80, 1000, ISN_S, ISN_C + 1, SYN | ACK, &[]),
        seg(true, ISN_C + 1, ACK, &[]),
    ]
}

/// (to_server, established, stream offset, bytes).
type Delivery = (bool, bool, u64, Vec<u8>);

#[derive(Debug, Clone, PartialEq, Eq)]
struct Out {
    /// Per packet: None if no chunk, else (to_server, established, offset, bytes).
    chunks: Vec<Option<Delivery>>,
    dropped: Vec<bool>,
    /// Per packet: its chunk follows skipped bytes (a resynchronisation).
    gaps: Vec<bool>,
    /// Per packet: its chunk holds the other direction's bytes
    /// ([`StreamChunk::peer`]).
    peers: Vec<bool>,
    /// Per packet: its payload as it leaves, and whether its checksums verify.
    payloads: Vec<(Vec<u8>, bool)>,
}

struct Harness {
    r: Reassembler,
    pool: PacketPool,
    streams: Streams,
    ts: u64,
}

impl Harness {
    fn new(cfg: Config) -> Self {
        Harness {
            r: Reassembler::new(Namespace(7), cfg),
            pool: PacketPool::new(256),
            streams: Streams::default(),
            ts: 1_000_000_000,
        }
    }

    fn run(&mut self, store: &mut dyn StateStore, frames: &[Vec<u8>]) -> Out {
        let stamped: Vec<(u64, Vec<u8>)> = frames
            .iter()
            .map(|f| {
                self.ts += 1000;
                (self.ts, f.clone())
            })
            .collect();
        self.run_at(store, &stamped)
    }

    /// One batch of frames with their own times.
    fn run_at(&mut self, store: &mut dyn StateStore, frames: &[(u64, Vec<u8>)]) -> Out {
        let mut b = Batch::with_capacity(frames.len());
        for (ts, f) in frames {
            self.ts = self.ts.max(*ts);
            assert!(b.push_frame(&mut self.pool, f, *ts, 0));
        }
        for p in &mut b.pkts {
            p.meta = parse_frame(p.data()).unwrap();
        }
        self.r.process(&mut b, store, &mut self.streams, 3).unwrap();
        let mut out = Out {
            chunks: Vec::new(),
            dropped: Vec::new(),
            gaps: Vec::new(),
            peers: Vec::new(),
            payloads: Vec::new(),
        };
        for (i, p) in b.pkts.iter().enumerate() {
            out.payloads.push((
                p.meta.payload(p.data()).to_vec(),
                verify_all_checksums(p.data()),
            ));
            out.dropped.push(p.verdict != Verdict::Forward);
            out.gaps
                .push(self.streams.bytes(i, p).is_some_and(|(c, _, _)| c.gap));
            out.peers
                .push(self.streams.bytes(i, p).is_some_and(|(c, _, _)| c.peer));
            out.chunks
                .push(self.streams.bytes(i, p).map(|(c, own, extra)| {
                    let mut v = own.to_vec();
                    v.extend_from_slice(extra);
                    (c.to_server, c.established, c.stream_offset, v)
                }));
        }
        b.recycle(&mut self.pool);
        out
    }

    /// Runs each frame as its own batch; concatenates delivered client bytes.
    fn run_each(&mut self, store: &mut dyn StateStore, frames: &[Vec<u8>]) -> Out {
        let mut all = Out {
            chunks: Vec::new(),
            dropped: Vec::new(),
            gaps: Vec::new(),
            peers: Vec::new(),
            payloads: Vec::new(),
        };
        for f in frames {
            let o = self.run(store, std::slice::from_ref(f));
            all.chunks.extend(o.chunks);
            all.dropped.extend(o.dropped);
            all.gaps.extend(o.gaps);
            all.peers.extend(o.peers);
            all.payloads.extend(o.payloads);
        }
        all
    }
}

fn stream(out: &Out, to_server: bool) -> Vec<u8> {
    let mut v = Vec::new();
    for (ts, _, off, b) in out.chunks.iter().flatten() {
        if *ts == to_server {
            assert_eq!(*off as usize, v.len(), "stream offsets are contiguous");
            v.extend_from_slice(b);
        }
    }
    v
}

#[test]
fn in_order_and_handshake_flag() {
    let mut st = LocalStore::new();
    let mut h = Harness::new(Config::default());
    let hs = h.run(&mut st, &handshake()[..2]);
    assert!(!hs.chunks[0].as_ref().unwrap().1);
    assert!(!hs.chunks[1].as_ref().unwrap().1, "SYN-ACK: not yet");
    let o = h.run(
        &mut st,
        &[
            seg(true, ISN_C + 1, ACK, &[]),
            cdata(0, b"hello "),
            cdata(6, b"world"),
        ],
    );
    assert!(
        o.chunks.iter().all(|c| c.as_ref().unwrap().1),
        "established"
    );
    assert_eq!(stream(&o, true), b"hello world");
    assert_eq!(o.chunks[2].as_ref().unwrap().2, 6);
}

#[test]
fn out_of_order_reversed_and_shuffled_in_one_and_many_batches() {
    let data: Vec<u8> = (0..100u8).collect();
    let segs: Vec<Vec<u8>> = (0..10)
        .map(|i| cdata(i * 10, &data[i as usize * 10..i as usize * 10 + 10]))
        .collect();
    let orders: Vec<Vec<usize>> = vec![(0..10).rev().collect(), vec![3, 1, 0, 7, 2, 9, 5, 4, 8, 6]];
    for order in orders {
        let frames: Vec<Vec<u8>> = order.iter().map(|&i| segs[i].clone()).collect();
        for one_batch in [true, false] {
            let mut st = LocalStore::new();
            let mut h = Harness::new(Config::default());
            h.run(&mut st, &handshake());
            let o = if one_batch {
                h.run(&mut st, &frames)
            } else {
                h.run_each(&mut st, &frames)
            };
            assert_eq!(
                stream(&o, true),
                data,
                "order {order:?} one batch {one_batch}"
            );
            assert!(o.dropped.iter().all(|d| !d));
            // Every segment that arrived before its predecessor was buffered and
            // later released.
            let mut have = [false; 10];
            let (mut next, mut buffered) = (0, 0);
            for &i in &order {
                have[i] = true;
                buffered += usize::from(i != next);
                while next < 10 && have[next] {
                    next += 1;
                }
            }
            assert_eq!(h.r.counters().released_segments as usize, buffered);
            assert_eq!(h.r.counters().buffered_segments as usize, buffered);
        }
    }
}

#[test]
fn retransmissions_exact_and_partial_overlap_first_wins() {
    let mut st = LocalStore::new();
    let mut h = Harness::new(Config::default());
    h.run(&mut st, &handshake());
    let o = h.run_each(
        &mut st,
        &[
            cdata(0, b"abcdef"),
            cdata(0, b"abcdef"), // exact retransmission: nothing new
            cdata(3, b"XYZghi"), // partial overlap: "XYZ" conflicts, first wins
            cdata(12, b"mno"),   // out of order
            cdata(9, b"QRSkl"),  // fills; "kl" overlaps buffered "mn": buffered wins
        ],
    );
    assert_eq!(o.chunks[1].as_ref().unwrap().3, b"");
    assert_eq!(o.chunks[2].as_ref().unwrap().3, b"ghi");
    assert_eq!(o.chunks[4].as_ref().unwrap().3, b"QRSmno");
    assert_eq!(stream(&o, true), b"abcdefghiQRSmno");
    assert_eq!(h.r.counters().duplicate_bytes, 6 + 3 + 2);
    // The filling packet leaves carrying the buffered bytes where it lay
    // under them, with its checksum recomputed: its receiver, which holds
    // "mno" already, reads what was inspected whichever copy it keeps.
    assert_eq!(o.payloads[4], (b"QRSmn".to_vec(), true));
    assert_eq!(h.r.counters().overlap_rewrites, 1);
    assert!(o.dropped.iter().all(|d| !d));
}

#[test]
fn buffered_segment_overlaps_keep_first_received() {
    let mut st = LocalStore::new();
    let mut h = Harness::new(Config::default());
    h.run(&mut st, &handshake());
    // Buffered [5,10) "BBBBB" first, then [3,12) "aaaaaaaaa" out of order
    // over it: a receiver may keep either copy (Linux keeps the later, which
    // covers the earlier), so the later is dropped, leaving nothing behind.
    // Resent once [0,3) arrived, it is in order and leaves carrying "BBBBB".
    let o = h.run_each(
        &mut st,
        &[
            cdata(5, b"BBBBB"),
            cdata(3, b"aaaaaaaaa"),
            cdata(0, b"xyz"),
            cdata(3, b"aaaaaaaaa"),
        ],
    );
    assert_eq!(o.dropped, vec![false, true, false, false]);
    assert_eq!(stream(&o, true), b"xyzaaBBBBBaa");
    assert_eq!(o.payloads[3], (b"aaBBBBBaa".to_vec(), true));
    let c = h.r.counters();
    assert_eq!((c.overlap_drops, c.overlap_rewrites), (1, 1));
}

#[test]
fn data_without_ack_is_dropped_before_it_counts() {
    // Every receiver discards a data segment without ACK; if it counted here,
    // its bytes would stand for the real ones sent after it.
    let mut st = LocalStore::new();
    let mut h = Harness::new(Config::default());
    h.run(&mut st, &handshake());
    let o = h.run_each(
        &mut st,
        &[seg(true, ISN_C + 1, PSH, b"decoy"), cdata(0, b"real!")],
    );
    assert_eq!(o.dropped, vec![true, false]);
    assert_eq!(stream(&o, true), b"real!");
    assert_eq!(h.r.counters().no_ack_drops, 1);
}

/// Client data at stream offset `off` carrying the TCP timestamp `tsval`.
fn cdata_ts(off: u32, tsval: u32, payload: &[u8]) -> Vec<u8> {
    let mut t = sluice_wire::build::tcp_repr(1000, 80, ISN_C + 1 + off, ISN_S + 1, ACK | PSH);
    t.options.timestamps = Some((tsval, 1));
    let mut buf = vec![0u8; 14 + 20 + 60 + payload.len()];
    let n = sluice_wire::build::write_frame(
        &mut buf,
        sluice_wire::IpAddr::V4(C),
        sluice_wire::IpAddr::V4(S),
        sluice_wire::build::Transport::Tcp(t),
        payload,
    )
    .unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn a_segment_with_a_stale_timestamp_is_dropped_as_the_host_would() {
    // PAWS evasion: the decoy carries an older timestamp than the segment
    // before it, so Linux discards it; if the reassembler took its bytes
    // (first wins), the real bytes sent after would pass as a retransmission.
    let mut st = LocalStore::new();
    let mut h = Harness::new(Config::default());
    h.run(&mut st, &handshake());
    let o = h.run_each(
        &mut st,
        &[
            cdata_ts(0, 1000, b"GET /"),
            cdata_ts(5, 900, b"decoy"),
            cdata_ts(5, 1001, b"evil!"),
        ],
    );
    assert_eq!(o.dropped, vec![false, true, false]);
    assert_eq!(stream(&o, true), b"GET /evil!");
    assert_eq!(h.r.counters().paws_drops, 1);
    // Across batches too (ts_recent lives in the record), and timestamps wrap:
    // 2^32 - 5 is older than 3 only in serial arithmetic.
    let o = h.run_each(&mut st, &[cdata_ts(10, 1000, b"old")]);
    assert_eq!(o.dropped, vec![true]);
    let o = h.run_each(
        &mut st,
        &[
            cdata_ts(10, 0x8000_0000 + 999, b"a"),
            cdata_ts(11, u32::MAX - 5, b"wrap"),
            cdata_ts(15, 3, b"ok"),
        ],
    );
    assert_eq!(o.dropped, vec![false, false, false]);
    let bytes: Vec<u8> = o
        .chunks
        .iter()
        .flatten()
        .flat_map(|c| c.3.clone())
        .collect();
    assert_eq!(bytes, b"awrapok");
    // Segments without timestamps are not judged; a segment beyond a gap does
    // not move ts_recent (the host would not take its timestamp either).
    let o = h.run_each(
        &mut st,
        &[
            cdata_ts(100, 1_000_000, b"far"),
            cdata(16, b"plain"),
            cdata_ts(21, 4, b"next"),
        ],
    );
    assert_eq!(o.dropped, vec![false, false, false]);
    assert_eq!(h.r.counters().paws_drops, 2);
}

#[test]
fn overflow_drops_and_retransmission_recovers() {
    let mut st = LocalStore::new();
    let cfg = Config {
        max_segments: 2,
        max_bytes: 100,
        ..Config::default()
    };
    let mut h = Harness::new(cfg);
    h.run(&mut st, &handshake());
    let o = h.run(
        &mut st,
        &[
            cdata(10, b"b"),
            cdata(20, b"c"),
            cdata(30, b"d"),
            cdata(200, &[1; 101]),
        ],
    );
    assert_eq!(o.dropped, vec![false, false, true, true]);
    assert!(o.chunks[2].is_none() && o.chunks[3].is_none());
    assert_eq!(h.r.counters().overflow_drops, 2);
    let o = h.run(
        &mut st,
        &[
            cdata(0, &[b'a'; 10]),
            cdata(11, &[b'z'; 9]),
            cdata(21, &[b'y'; 9]),
            cdata(30, b"d"),
        ],
    );
    let mut want = vec![b'a'; 10];
    want.push(b'b');
    want.extend_from_slice(&[b'z'; 9]);
    want.push(b'c');
    want.extend_from_slice(&[b'y'; 9]);
    want.push(b'd');
    assert_eq!(stream(&o, true), want);
}

#[test]
fn both_directions_are_independent() {
    let mut st = LocalStore::new();
    let mut h = Harness::new(Config::default());
    h.run(&mut st, &handshake());
    let o = h.run(
        &mut st,
        &[
            sdata(3, b"def"),
            cdata(0, b"GET "),
            sdata(0, b"abc"),
            cdata(4, b"/"),
        ],
    );
    assert_eq!(stream(&o, true), b"GET /");
    assert_eq!(stream(&o, false), b"abcdef");
    assert!(!o.chunks[2].as_ref().unwrap().0);
}

#[test]
fn pure_acks_do_not_write() {
    let mut st = LocalStore::new();
    let mut h = Harness::new(Config::default());
    h.run(&mut st, &handshake());
    h.run(&mut st, &[cdata(0, b"x")]);
    let before = st.counters();
    h.run(&mut st, &[seg(false, ISN_S + 1, ACK, &[])]);
    let d = st.counters().since(&before);
    assert_eq!((d.reads, d.writes, d.round_trips), (1, 0, 1));
    let before = st.counters();
    h.run(&mut st, &[cdata(1, b"y")]);
    let d = st.counters().since(&before);
    assert_eq!((d.reads, d.writes, d.round_trips), (1, 1, 2));
}

#[test]
fn midstream_policy() {
    let frames = [cdata(0, b"hello"), sdata(0, b"hi")];
    let mut st = LocalStore::new();
    let mut h = Harness::new(Config::default());
    let o = h.run(&mut st, &frames);
    assert_eq!(o.chunks, vec![None, None]);
    assert_eq!(h.r.counters().untracked, 2);
    let mut st = LocalStore::new();
    let mut h = Harness::new(Config {
        midstream: true,
        ..Config::default()
    });
    let o = h.run(&mut st, &frames);
    assert_eq!(stream(&o, true), b"hello");
    assert_eq!(stream(&o, false), b"hi");
    assert!(
        o.chunks[0].as_ref().unwrap().1,
        "midstream counts as established"
    );
}

#[test]
fn fin_and_new_connection_on_same_tuple() {
    let mut st = LocalStore::new();
    let mut h = Harness::new(Config::default());
    h.run(&mut st, &handshake());
    h.run(&mut st, &[cdata(0, b"one")]);
    // An injected SYN with a new ISN on a live connection is ignored.
    let o = h.run(&mut st, &[seg(true, 9999, SYN, &[]), cdata(3, b"two")]);
    assert_eq!(o.chunks[1].as_ref().unwrap().3, b"two");
    assert_eq!(h.r.counters().syn_ignored, 1);
    h.run(
        &mut st,
        &[
            seg(true, ISN_C + 7, FIN | ACK, &[]),
            seg(false, ISN_S + 1, FIN | ACK, &[]),
        ],
    );
    let o = h.run(
        &mut st,
        &[
            seg(true, 7000, SYN, &[]),
            tcp_v4(S, C, 80, 1000, 8000, 7001, SYN | ACK, &[]),
            tcp_v4(C, S, 1000, 80, 7001, 8001, ACK | PSH, b"new"),
        ],
    );
    assert_eq!(stream(&o, true), b"new");
    assert!(o.chunks[2].as_ref().unwrap().1);
}

#[test]
fn idle_timeout_expires_records_and_blobs() {
    let mut st = LocalStore::new();
    let mut h = Harness::new(Config {
        idle_timeout_secs: 10,
        ..Config::default()
    });
    h.run(&mut st, &handshake());
    h.run(&mut st, &[cdata(5, b"later")]);
    assert!(st.len() >= 2);
    assert_eq!(h.r.on_timers(h.ts + 1_000_000_000, &mut st).unwrap(), 0);
    assert_eq!(h.r.on_timers(h.ts + 11_000_000_000, &mut st).unwrap(), 1);
    assert_eq!(st.len(), 0, "record and blob deleted");
    assert_eq!(st.armed_timers(), 0);
    // Treated as absent afterwards.
    let o = h.run(&mut st, &[cdata(0, b"x")]);
    assert_eq!(o.chunks, vec![None]);
}

#[test]
fn two_instances_on_a_shared_store_behave_as_one() {
    let data: Vec<u8> = (0..200).map(|i| (i * 7 % 251) as u8).collect();
    let mut frames = handshake();
    let order = [5usize, 0, 2, 1, 9, 3, 4, 8, 7, 6];
    for &i in &order {
        frames.push(cdata(i as u32 * 20, &data[i * 20..i * 20 + 20]));
        frames.push(sdata(i as u32 * 20, &data[i * 20..i * 20 + 20]));
        frames.push(seg(false, ISN_S + 1, ACK, &[]));
    }
    let batches: Vec<&[Vec<u8>]> = frames.chunks(4).collect();

    let mut st = LocalStore::new();
    let mut one = Harness::new(Config::default());
    let single: Vec<Out> = batches.iter().map(|b| one.run(&mut st, b)).collect();

    let shared = SharedLocalStore::new();
    let (mut s1, mut s2) = (shared.handle(), shared.handle());
    let mut a = Harness::new(Config::default());
    let mut b = Harness::new(Config::default());
    let two: Vec<Out> = batches
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
    let flat = Out {
        chunks: single.iter().flat_map(|o| o.chunks.clone()).collect(),
        dropped: vec![],
        gaps: vec![],
        peers: vec![],
        payloads: vec![],
    };
    assert_eq!(stream(&flat, true), data);
    assert_eq!(stream(&flat, false), data);
}

#[test]
fn garbage_state_never_panics() {
    let mut st = LocalStore::new();
    let mut h = Harness::new(Config::default());
    h.run(&mut st, &handshake());
    // Overwrite the record with junk.
    let (canon, _) = parse_frame(&cdata(0, b"")).unwrap().flow.canonical();
    let key = sluice_state::Key::flow(Namespace(7), sluice_reassembly::TABLE_CONN, &canon, &[]);
    let mut ops = sluice_state::Ops::new();
    ops.put(key, &[1, 2, 3]);
    st.execute(&mut ops).unwrap();
    let o = h.run(&mut st, &[cdata(0, b"x")]);
    assert_eq!(o.dropped, vec![true]);
    assert_eq!(h.r.counters().corrupt_records, 1);
    // A new SYN recovers.
    let o = h.run(&mut st, &handshake());
    assert!(o.dropped.iter().all(|d| !d));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn any_permutation_delivers_the_stream_once_in_order(
        sizes in prop::collection::vec(1usize..200, 1..16),
        perm_seed in any::<u64>(),
        batch in 1usize..6,
    ) {
        let total: usize = sizes.iter().sum();
        let data: Vec<u8> = (0..total).map(|i| (i * 31 % 256) as u8).collect();
        let mut frames = Vec::new();
        let mut off = 0;
        for s in &sizes {
            frames.push(cdata(off as u32, &data[off..off + s]));
            off += s;
        }
        // Fisher-Yates with a simple LCG.
        let mut x = perm_seed | 1;
        for i in (1..frames.len()).rev() {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let j = (x >> 33) as usize % (i + 1);
            frames.swap(i, j);
        }
        let mut st = LocalStore::new();
        let mut h = Harness::new(Config::default());
        h.run(&mut st, &handshake());
        let mut got = Vec::new();
        for b in frames.chunks(batch) {
            let o = h.run(&mut st, b);
            prop_assert!(o.dropped.iter().all(|d| !d));
            for (_, _, off, bytes) in o.chunks.iter().flatten() {
                prop_assert_eq!(*off as usize, got.len());
                got.extend_from_slice(bytes);
            }
        }
        prop_assert_eq!(got, data);
    }
}

#[test]
fn ipv6_out_of_order_fits_keys() {
    use sluice_wire::build::tcp_v6;
    let (a, b) = (
        [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        [0xfe; 16],
    );
    let f = |seq: u32, flags: u8, p: &[u8]| tcp_v6(a, b, 1000, 443, seq, 1, flags, p);
    let mut st = LocalStore::new();
    let mut h = Harness::new(Config::default());
    h.run(
        &mut st,
        &[
            f(10, SYN, &[]),
            tcp_v6(b, a, 443, 1000, 50, 11, SYN | ACK, &[]),
        ],
    );
    let o = h.run_each(&mut st, &[f(14, ACK, b"def"), f(11, ACK, b"abc")]);
    assert_eq!(stream(&o, true), b"abcdef");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn overlapping_retransmissions_deliver_the_stream_once(
        sizes in prop::collection::vec(1usize..120, 1..10),
        extra in prop::collection::vec((0usize..1000, 1usize..300), 0..8),
        perm_seed in any::<u64>(),
        batch in 1usize..5,
    ) {
        let total: usize = sizes.iter().sum();
        let data: Vec<u8> = (0..total).map(|i| (i * 17 % 253) as u8).collect();
        let mut frames = Vec::new();
        let mut off = 0;
        for s in &sizes {
            frames.push(cdata(off as u32, &data[off..off + s]));
            off += s;
        }
        // Re-segmented copies of the same bytes: overlaps agree with the original.
        for (start, len) in extra {
            let start = start % total;
            let end = (start + len).min(total);
            frames.push(cdata(start as u32, &data[start..end]));
        }
        let mut x = perm_seed | 1;
        for i in (1..frames.len()).rev() {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let j = (x >> 33) as usize % (i + 1);
            frames.swap(i, j);
        }
        let mut st = LocalStore::new();
        let mut h = Harness::new(Config { max_segments: 64, ..Config::default() });
        h.run(&mut st, &handshake());
        let mut got = Vec::new();
        let deliver = |o: &Out, got: &mut Vec<u8>| -> Result<(), TestCaseError> {
            for (_, _, off, bytes) in o.chunks.iter().flatten() {
                prop_assert_eq!(*off as usize, got.len());
                got.extend_from_slice(bytes);
            }
            // Copies agree: nothing is ever rewritten.
            for (k, (_, ok)) in o.payloads.iter().enumerate() {
                prop_assert!(o.dropped[k] || *ok);
            }
            Ok(())
        };
        for b in frames.chunks(batch) {
            let o = h.run(&mut st, b);
            deliver(&o, &mut got)?;
        }
        // Out-of-order copies over buffered bytes were dropped; the sender
        // retransmits from what was acknowledged, in order.
        let mut rounds = 0;
        while got.len() < total && rounds < 3 {
            let from = got.len();
            let o = h.run(&mut st, &[cdata(from as u32, &data[from..])]);
            deliver(&o, &mut got)?;
            rounds += 1;
        }
        prop_assert_eq!(got, data);
        prop_assert_eq!(h.r.counters().overlap_rewrites, 0);
    }
}

/// The server acknowledging client bytes up to stream offset `off`.
fn server_ack(off: u32) -> Vec<u8> {
    tcp_v4(S, C, 80, 1000, ISN_S + 1, ISN_C + 1 + off, ACK, &[])
}

#[test]
fn a_receiver_acknowledging_bytes_we_never_saw_resynchronises_the_stream() {
    // Bytes 10..20 crossed another instance, which died before its progress
    // reached the store: this record still expects offset 10. Nobody will send
    // those bytes again, so without a resync the connection would stall once
    // the out-of-order buffer filled.
    let mut h = Harness::new(Config::default());
    let mut s = LocalStore::new();
    h.run_each(&mut s, &handshake());
    h.run(&mut s, &[cdata(0, b"0123456789")]);
    let o = h.run(&mut s, &[cdata(20, b"cccc")]);
    assert_eq!(o.chunks[0].as_ref().map(|c| c.3.len()), Some(0), "buffered");
    assert!(!o.dropped[0], "out-of-order packets are forwarded");
    // The server has everything up to 24: the gap reached it past us. Its
    // ACK brings no bytes of its own, so it releases the buffered ones,
    // flagged: they are the client's, travelling the other way.
    let o = h.run(&mut s, &[server_ack(24)]);
    assert_eq!(h.r.counters().resyncs, 1);
    assert_eq!(h.r.counters().resync_skipped_bytes, 10);
    assert_eq!(
        o.chunks[0],
        Some((true, true, 20, b"cccc".to_vec())),
        "the buffered bytes, from offset 20"
    );
    assert!(o.gaps[0] && o.peers[0]);
    assert_eq!(h.r.counters().peer_releases, 1);
    // The next client bytes come in order after them, no longer flagged.
    let o = h.run(&mut s, &[cdata(24, b"dddd")]);
    assert_eq!(o.chunks[0], Some((true, true, 24, b"dddd".to_vec())));
    assert!(!o.gaps[0] && !o.peers[0]);
}

/// After a resynchronisation the buffered bytes are released by the next
/// packet without bytes of its own, of either direction: the receiver's ACK
/// or RST (the sender may send nothing more), else the sender's FIN, ACK or
/// RST. They were forwarded already, so they are delivered (scanned) then
/// rather than never.
#[test]
fn a_packet_without_data_releases_the_bytes_a_resync_left_buffered() {
    // The receiver's own packet, acknowledging past the gap: an ACK or RST.
    for flags in [ACK, RST | ACK] {
        let mut h = Harness::new(Config::default());
        let mut s = LocalStore::new();
        h.run_each(&mut s, &handshake());
        h.run(&mut s, &[cdata(0, b"0123456789")]);
        h.run(&mut s, &[cdata(20, b"cccc")]);
        let ack = tcp_v4(S, C, 80, 1000, ISN_S + 1, ISN_C + 1 + 24, flags, &[]);
        let o = h.run(&mut s, &[ack]);
        assert_eq!(h.r.counters().resyncs, 1);
        assert_eq!(
            o.chunks[0],
            Some((true, true, 20, b"cccc".to_vec())),
            "flags {flags:#x}: the buffered bytes, from offset 20"
        );
        assert!(o.gaps[0] && o.peers[0], "flags {flags:#x}");
    }
    // The receiver's acknowledgement carries data of its own: the sender's
    // next packet, even without data, releases them.
    for flags in [FIN | ACK, ACK, RST | ACK] {
        let mut h = Harness::new(Config::default());
        let mut s = LocalStore::new();
        h.run_each(&mut s, &handshake());
        h.run(&mut s, &[cdata(0, b"0123456789")]);
        h.run(&mut s, &[cdata(20, b"cccc")]);
        let reply = tcp_v4(S, C, 80, 1000, ISN_S + 1, ISN_C + 1 + 24, ACK, b"ok");
        let o = h.run(&mut s, &[reply]);
        assert_eq!(h.r.counters().resyncs, 1);
        assert_eq!(o.chunks[0], Some((false, true, 0, b"ok".to_vec())));
        assert!(!o.peers[0]);
        let last = tcp_v4(C, S, 1000, 80, ISN_C + 1 + 24, ISN_S + 3, flags, &[]);
        let o = h.run(&mut s, &[last]);
        assert_eq!(
            o.chunks[0],
            Some((true, true, 20, b"cccc".to_vec())),
            "flags {flags:#x}: the buffered bytes, from offset 20"
        );
        assert!(o.gaps[0] && !o.peers[0], "flags {flags:#x}");
        // Delivered once: a later packet brings only its own bytes.
        let o = h.run(&mut s, &[cdata(24, b"dddd")]);
        assert_eq!(
            o.chunks[0].as_ref().map(|c| c.3.clone()),
            Some(b"dddd".to_vec())
        );
    }
}

#[test]
fn acknowledgements_that_prove_nothing_change_nothing() {
    let mut h = Harness::new(Config::default());
    let mut s = LocalStore::new();
    h.run_each(&mut s, &handshake());
    h.run(&mut s, &[cdata(0, b"0123456789")]);
    // A real gap (lost on the way) with a segment buffered behind it: the
    // receiver cannot acknowledge what it lacks; an acknowledgement beyond
    // anything the client sent is bogus. Neither skips the gap.
    h.run(&mut s, &[cdata(20, b"cccc")]);
    h.run(&mut s, &[server_ack(10), server_ack(25), server_ack(9000)]);
    assert_eq!(h.r.counters().resyncs, 0);
    // The retransmitted gap then fills it as usual, nothing skipped.
    let o = h.run(&mut s, &[cdata(10, b"bbbbbbbbbb")]);
    assert_eq!(
        o.chunks[0],
        Some((true, true, 10, b"bbbbbbbbbbcccc".to_vec()))
    );
    assert!(!o.gaps[0]);
    // No buffered segments: an acknowledgement ahead proves nothing either.
    h.run(&mut s, &[server_ack(40)]);
    assert_eq!(h.r.counters().resyncs, 0);
}

/// Segments as large as a capture with segmentation offload holds (60 KiB),
/// in order, out of order within the buffer bound, and overlapping: offsets
/// and lengths past 1500 bytes (and past 32 KiB) are carried whole, across
/// batches and within one.
#[test]
fn offloaded_60k_segments_reassemble_whole() {
    const BIG: usize = 60 * 1024;
    let data: Vec<u8> = (0..4 * BIG).map(|i| (i * 7 + i / 4099) as u8).collect();
    let part = |k: usize| &data[k * BIG..(k + 1) * BIG];
    for one_batch in [false, true] {
        let mut st = LocalStore::new();
        let mut h = Harness::new(Config::default());
        h.run(&mut st, &handshake());
        // Segment 1 before 0 (buffered: 60 KiB fits the 64 KiB bound), then a
        // retransmission of segment 0 overlapping half of segment 1, then 2, 3.
        let mut overlap = data[BIG / 2..BIG + BIG / 2].to_vec();
        overlap[0] ^= 0xff; // "first wins": these bytes were already received
        let frames = vec![
            cdata(BIG as u32, part(1)),
            cdata(0, part(0)),
            cdata((BIG / 2) as u32, &overlap),
            cdata(2 * BIG as u32, part(2)),
            cdata(3 * BIG as u32, part(3)),
        ];
        assert!(frames[0].len() > 60_000);
        let o = if one_batch {
            h.run(&mut st, &frames)
        } else {
            h.run_each(&mut st, &frames)
        };
        assert_eq!(o.dropped, vec![false; 5], "one_batch {one_batch}");
        assert!(
            stream(&o, true) == data,
            "one_batch {one_batch}: the client stream is whole and in order"
        );
    }
}

#[test]
fn idleness_is_judged_at_each_packets_own_time() {
    // Timeout 10 s. After the handshake and two bytes, one batch holds the next
    // bytes just below the timeout and, far later, a server segment: the bytes
    // are delivered (their packet finds the connection live), the late segment
    // finds it idle past the timeout (untracked). A packet exactly at the
    // timeout finds it expired, as a timer run then would have.
    const SEC: u64 = 1_000_000_000;
    let t0 = 100 * SEC;
    let mut outs = Vec::new();
    for batch_two in [
        vec![
            (t0 + 10 * SEC - 1, cdata(2, b"cd")),
            (t0 + 25 * SEC, sdata(0, b"x")),
        ],
        vec![(t0 + 10 * SEC, cdata(2, b"cd"))],
    ] {
        let mut st = LocalStore::new();
        let mut h = Harness::new(Config {
            idle_timeout_secs: 10,
            ..Config::default()
        });
        let mut first: Vec<(u64, Vec<u8>)> = handshake().into_iter().map(|f| (t0, f)).collect();
        first.push((t0, cdata(0, b"ab")));
        assert_eq!(stream(&h.run_at(&mut st, &first), true), b"ab");
        outs.push(h.run_at(&mut st, &batch_two).chunks);
        if batch_two.len() == 1 {
            // Its timer, run now, finds nothing left to expire.
            assert_eq!(h.r.on_timers(t0 + 10 * SEC, &mut st).unwrap(), 0);
            assert_eq!(
                st.len(),
                0,
                "record deleted by the packet that found it idle"
            );
        }
    }
    assert_eq!(
        outs[0],
        vec![Some((true, true, 2, b"cd".to_vec())), None],
        "delivered just below the timeout; the late segment is untracked"
    );
    assert_eq!(outs[1], vec![None], "expired at the timeout");
}

#[test]
fn fast_open_data_in_syn_and_syn_ack_is_stream_data() {
    for batched in [false, true] {
        let mut st = LocalStore::new();
        let mut h = Harness::new(Config::default());
        let frames = [
            seg(true, ISN_C, SYN, b"GET /tfo"),
            // The server accepts the data (acknowledges it) and answers in
            // its SYN-ACK.
            tcp_v4(S, C, 80, 1000, ISN_S, ISN_C + 1 + 8, SYN | ACK, b"hi"),
            seg(true, ISN_C, SYN, b"GET /tfo"), // a retransmitted SYN: nothing new
            tcp_v4(C, S, 1000, 80, ISN_C + 9, ISN_S + 3, ACK, &[]),
            seg(true, ISN_C + 9, ACK | PSH, b" HTTP/1.1"),
        ];
        let o = if batched {
            h.run(&mut st, &frames)
        } else {
            h.run_each(&mut st, &frames)
        };
        assert_eq!(stream(&o, true), b"GET /tfo HTTP/1.1", "batched {batched}");
        assert_eq!(stream(&o, false), b"hi", "batched {batched}");
        // The SYN's data counts as established (the server's application has
        // it), and the handshake completes although the ACK covers "hi".
        assert!(o.chunks[0].as_ref().unwrap().1);
        assert!(o.chunks[4].as_ref().unwrap().1);
        assert!(o.chunks[2].as_ref().unwrap().3.is_empty());
        assert_eq!(h.r.counters().tfo_bytes, 10);
    }
}

#[test]
fn syn_data_the_server_refused_is_scanned_again_when_resent() {
    // No valid cookie: the server acknowledges only the SYN, and the client
    // sends its data again after the handshake. The resent bytes need not be
    // the SYN's (an evasion if they were trimmed as duplicates): the stream
    // rewinds, flagged as a gap, and delivers them.
    let mut st = LocalStore::new();
    let mut h = Harness::new(Config::default());
    let o = h.run_each(
        &mut st,
        &[
            seg(true, ISN_C, SYN, b"harmless"),
            tcp_v4(S, C, 80, 1000, ISN_S, ISN_C + 1, SYN | ACK, &[]),
            seg(true, ISN_C + 1, ACK, &[]),
            cdata(0, b"EVILDATA"),
        ],
    );
    let last = o.chunks[3].as_ref().unwrap();
    assert_eq!((last.2, last.3.as_slice()), (0, &b"EVILDATA"[..]));
    assert!(o.gaps[3], "the consumer restarts its automata");
    assert!(last.1, "established");
}
