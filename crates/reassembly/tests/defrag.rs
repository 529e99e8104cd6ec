//! IP defragmentation (`udp_fragments` / `other_fragments: reassemble`)
//! over a local and a shared store, with simulated time.

use sluice_packet::{Batch, PacketPool, Verdict};
use sluice_reassembly::{Config, Fragments, Reassembler, Streams};
use sluice_state::{LocalStore, Namespace, SharedLocalStore, StateStore};
use sluice_wire::build::udp_v4;
use sluice_wire::parse::{parse_frame, Fragment};

const C: [u8; 4] = [10, 0, 0, 1];
const S: [u8; 4] = [10, 0, 0, 2];
const SEC: u64 = 1_000_000_000;

fn cfg() -> Config {
    Config {
        udp_fragments: Fragments::Reassemble,
        other_fragments: Fragments::Reassemble,
        ..Config::default()
    }
}

/// The datagram of a UDP frame over IPv4 (no options) cut at `cuts`
/// (offsets into the IP payload, multiples of 8), identification `id`.
fn frag4(frame: &[u8], cuts: &[usize], id: u16) -> Vec<Vec<u8>> {
    let (hdr, data) = (&frame[..34], &frame[34..]);
    let mut bounds = vec![0];
    bounds.extend_from_slice(cuts);
    bounds.push(data.len());
    bounds
        .windows(2)
        .map(|w| {
            let (a, b) = (w[0], w[1]);
            let mut v = hdr.to_vec();
            v.extend_from_slice(&data[a..b]);
            v[16..18].copy_from_slice(&((20 + b - a) as u16).to_be_bytes());
            v[18..20].copy_from_slice(&id.to_be_bytes());
            let more = b < data.len();
            let fo = (a / 8) as u16 | if more { 0x2000 } else { 0 };
            v[20..22].copy_from_slice(&fo.to_be_bytes());
            v[24..26].fill(0);
            let sum = sluice_wire::checksum::checksum(&v[14..34]);
            v[24..26].copy_from_slice(&sum.to_be_bytes());
            v
        })
        .collect()
}

/// A raw IPv4 fragment: `data` at byte offset `off` of datagram `id`.
fn raw4(id: u16, off: usize, more: bool, data: &[u8]) -> Vec<u8> {
    let whole = udp_v4(C, S, 1, 2, &[]);
    let mut v = whole[..34].to_vec();
    v[23] = 17;
    v.extend_from_slice(data);
    v[16..18].copy_from_slice(&((20 + data.len()) as u16).to_be_bytes());
    v[18..20].copy_from_slice(&id.to_be_bytes());
    let fo = (off / 8) as u16 | if more { 0x2000 } else { 0 };
    v[20..22].copy_from_slice(&fo.to_be_bytes());
    v[24..26].fill(0);
    let sum = sluice_wire::checksum::checksum(&v[14..34]);
    v[24..26].copy_from_slice(&sum.to_be_bytes());
    v
}

/// A UDP datagram over IPv6 with a Hop-by-Hop header before the Fragment
/// header, cut at `cuts` (offsets into the fragmentable part).
fn frag6(payload: &[u8], cuts: &[usize], id: u32) -> (Vec<u8>, Vec<Vec<u8>>) {
    let src = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    let dst = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
    let whole = sluice_wire::build::udp_v6(src, dst, 4000, 53, payload);
    let udp = whole[54..].to_vec();
    let mut bounds = vec![0];
    bounds.extend_from_slice(cuts);
    bounds.push(udp.len());
    let frags = bounds
        .windows(2)
        .map(|w| {
            let (a, b) = (w[0], w[1]);
            let mut v = whole[..54].to_vec();
            v[20] = 0; // Hop-by-Hop next
            let pl = 8 + 8 + (b - a);
            v[18..20].copy_from_slice(&(pl as u16).to_be_bytes());
            // Hop-by-Hop: next header Fragment, length 0, PadN of 4.
            v.extend_from_slice(&[44, 0, 1, 4, 0, 0, 0, 0]);
            let more = b < udp.len();
            let fo = (a as u16) | more as u16;
            v.extend_from_slice(&[17, 0]);
            v.extend_from_slice(&fo.to_be_bytes());
            v.extend_from_slice(&id.to_be_bytes());
            v.extend_from_slice(&udp[a..b]);
            v
        })
        .collect();
    (whole, frags)
}

/// What one batch gave.
#[derive(Debug)]
struct Out {
    dropped: Vec<bool>,
    /// Each packet's frame as it leaves.
    frames: Vec<Vec<u8>>,
    /// Datagrams: (completing packet, frame).
    datagrams: Vec<(u32, Vec<u8>)>,
    /// The fragments that overlapped their datagram's bytes (Suricata's
    /// `frag_overlap`).
    overlapped: Vec<u32>,
}

struct Harness {
    r: Reassembler,
    pool: PacketPool,
    streams: Streams,
}

impl Harness {
    fn new(cfg: Config) -> Self {
        Harness {
            r: Reassembler::new(Namespace(7), cfg),
            pool: PacketPool::new(64),
            streams: Streams::default(),
        }
    }

    /// One batch at time `ts`; `drop` is what a later function drops (by
    /// index) before `finish`.
    fn run(
        &mut self,
        store: &mut dyn StateStore,
        ts: u64,
        frames: &[Vec<u8>],
        drop: &[usize],
    ) -> Out {
        let mut b = Batch::with_capacity(frames.len());
        for f in frames {
            assert!(b.push_frame(&mut self.pool, f, ts, 0));
        }
        for p in &mut b.pkts {
            p.meta = parse_frame(p.data()).unwrap();
        }
        self.r.process(&mut b, store, &mut self.streams, 3).unwrap();
        let datagrams = self
            .streams
            .datagrams
            .iter()
            .map(|d| (d.pkt, self.streams.datagram(d).to_vec()))
            .collect();
        let overlapped = self.streams.overlapped.clone();
        for &i in drop {
            b.pkts[i].drop_by(4, "test");
        }
        self.r.finish(&mut b, store).unwrap();
        let out = Out {
            dropped: b
                .pkts
                .iter()
                .map(|p| p.verdict != Verdict::Forward)
                .collect(),
            frames: b.pkts.iter().map(|p| p.data().to_vec()).collect(),
            datagrams,
            overlapped,
        };
        b.recycle(&mut self.pool);
        out
    }
}

/// The UDP payload of a (whole) frame.
fn payload(frame: &[u8]) -> Vec<u8> {
    let m = parse_frame(frame).unwrap();
    assert_eq!(m.fragment, Fragment::None);
    m.payload(frame).to_vec()
}

fn counter(r: &Reassembler, name: &str) -> u64 {
    let mut v = Vec::new();
    r.counter_list(&mut v);
    v.into_iter().find(|(n, _)| *n == name).unwrap().1
}

#[test]
fn the_fragment_completing_a_datagram_brings_it_whole_in_any_order() {
    let data: Vec<u8> = (0..100u8).collect();
    let whole = udp_v4(C, S, 4000, 53, &data);
    let frags = frag4(&whole, &[24, 56], 0x1234);
    let orders = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    for order in orders {
        // Each fragment its own batch.
        let mut h = Harness::new(cfg());
        let mut store = LocalStore::new();
        for (k, &i) in order.iter().enumerate() {
            let o = h.run(&mut store, SEC + k as u64, &[frags[i].clone()], &[]);
            assert_eq!(o.dropped, [false], "fragments are forwarded");
            assert_eq!(o.frames[0], frags[i], "unchanged");
            if k < 2 {
                assert!(o.datagrams.is_empty());
            } else {
                assert_eq!(o.datagrams.len(), 1);
                let d = &o.datagrams[0].1;
                assert_eq!(payload(d), data, "{order:?}");
                // The whole datagram's header: first fragment's, offset and
                // MF cleared, lengths and checksum right.
                assert_eq!(&d[14 + 20..], &whole[34..]);
                assert!(sluice_wire::rewrite::verify_all_checksums(d));
            }
        }
        // Nothing is left in the store but the timers' records of nothing.
        assert_eq!(store.len(), 0, "{order:?}");
        // All in one batch.
        let mut h = Harness::new(cfg());
        let mut store = LocalStore::new();
        let batch: Vec<Vec<u8>> = order.iter().map(|&i| frags[i].clone()).collect();
        let o = h.run(&mut store, SEC, &batch, &[]);
        assert_eq!(o.datagrams.len(), 1);
        assert_eq!(o.datagrams[0].0, 2, "the last of the batch completes it");
        assert_eq!(payload(&o.datagrams[0].1), data);
        assert_eq!(store.len(), 0);
    }
}

#[test]
fn any_instance_completes_a_datagram_others_started() {
    let data = b"0123456789abcdef0123456789abcdefXYZ".to_vec();
    let whole = udp_v4(C, S, 4000, 9999, &data);
    let frags = frag4(&whole, &[16, 32], 7);
    let shared = SharedLocalStore::new();
    let mut a = Harness::new(cfg());
    let mut b = Harness::new(cfg());
    let (mut sa, mut sb) = (shared.handle(), shared.handle());
    assert!(a
        .run(&mut sa, SEC, &[frags[2].clone()], &[])
        .datagrams
        .is_empty());
    assert!(b
        .run(&mut sb, SEC + 1, &[frags[0].clone()], &[])
        .datagrams
        .is_empty());
    let o = a.run(&mut sa, SEC + 2, &[frags[1].clone()], &[]);
    assert_eq!(payload(&o.datagrams[0].1), data);
}

#[test]
fn ipv6_fragments_after_an_extension_header_are_joined() {
    let data = b"the quick brown fox jumps over the lazy dog".to_vec();
    let (whole, frags) = frag6(&data, &[16, 32], 0xdead_beef);
    let mut h = Harness::new(cfg());
    let mut store = LocalStore::new();
    let o = h.run(
        &mut store,
        SEC,
        &[frags[2].clone(), frags[0].clone(), frags[1].clone()],
        &[],
    );
    assert_eq!(o.dropped, [false; 3]);
    let d = &o.datagrams[0].1;
    assert_eq!(payload(d), data);
    // The Hop-by-Hop header stays, naming UDP now; the Fragment header goes.
    assert_eq!(d[14 + 6], 0);
    assert_eq!(d[14 + 40], 17);
    assert_eq!(&d[14 + 48..], &whole[54..]);
    assert!(sluice_wire::rewrite::verify_all_checksums(d));
}

#[test]
fn the_first_copy_of_overlapping_bytes_wins_and_the_later_fragment_carries_it() {
    // AAAAAAAA at 8..16 first; a later fragment at 8 says BBBBBBBB there.
    let f0 = raw4(9, 0, true, b"\x00\x01\x00\x02\x00\x20\x00\x00AAAAAAAA");
    let f1 = raw4(9, 8, true, b"BBBBBBBBCCCCCCCC");
    let f2 = raw4(9, 24, false, b"DDDDDDDD");
    for split in [false, true] {
        let mut h = Harness::new(cfg());
        let mut store = LocalStore::new();
        let o = if split {
            h.run(&mut store, SEC, std::slice::from_ref(&f0), &[]);
            h.run(&mut store, SEC + 1, &[f1.clone(), f2.clone()], &[])
        } else {
            h.run(&mut store, SEC, &[f0.clone(), f1.clone(), f2.clone()], &[])
        };
        let d = &o.datagrams[0].1;
        assert_eq!(payload(d), b"AAAAAAAACCCCCCCCDDDDDDDD");
        // The later fragment leaves with the bytes inspected.
        let left = &o.frames[if split { 0 } else { 1 }];
        assert_eq!(&left[34..], b"AAAAAAAACCCCCCCC");
        assert_eq!(counter(&h.r, "reassembly_fragment_overlap_rewrites"), 1);
        // The later fragment is the one that overlapped.
        assert_eq!(o.overlapped, [if split { 0 } else { 1 }]);
    }
    // An exact duplicate with the same bytes is forwarded as it is.
    let mut h = Harness::new(cfg());
    let mut store = LocalStore::new();
    let o = h.run(
        &mut store,
        SEC,
        &[f0.clone(), f0.clone(), f1.clone(), f2.clone()],
        &[],
    );
    assert_eq!(o.dropped, [false; 4]);
    assert_eq!(o.frames[1], f0);
    assert_eq!(counter(&h.r, "reassembly_fragment_overlap_rewrites"), 1);
    // It overlaps all the same (Suricata raises `frag_overlap` on exact
    // duplicates too), as f1 overlaps f0's last 8 bytes; fragments side by
    // side do not.
    assert_eq!(o.overlapped, [1, 2]);
    let mut h = Harness::new(cfg());
    let o = h.run(&mut LocalStore::new(), SEC, &[f0, f1, f2], &[]);
    assert_eq!(o.overlapped, [1], "f1 overlaps f0's last 8 bytes");
    let g1 = raw4(10, 8, true, b"CCCCCCCC");
    let g0 = raw4(10, 0, true, b"\x00\x01\x00\x02\x00\x18\x00\x00");
    let g2 = raw4(10, 16, false, b"DDDDDDDD");
    let o = Harness::new(cfg()).run(&mut LocalStore::new(), SEC, &[g1, g0, g2], &[]);
    assert!(o.overlapped.is_empty(), "{:?}", o.overlapped);
}

#[test]
fn a_dropped_datagram_stays_blocked_so_no_receiver_completes_it() {
    let data = b"0123456789abcdefEVIL456789abcdef".to_vec();
    let whole = udp_v4(C, S, 4000, 53, &data);
    let frags = frag4(&whole, &[16], 11);
    // A later function drops the completing fragment.
    let mut h = Harness::new(cfg());
    let mut store = LocalStore::new();
    h.run(&mut store, SEC, &[frags[0].clone()], &[]);
    let o = h.run(&mut store, SEC + 1, &[frags[1].clone()], &[0]);
    assert_eq!(o.datagrams.len(), 1);
    // Sent again, it and any other fragment of the datagram are dropped
    // until the timeout.
    let o = h.run(
        &mut store,
        SEC + 2,
        &[frags[1].clone(), frags[0].clone()],
        &[],
    );
    assert_eq!(o.dropped, [true, true]);
    assert!(o.datagrams.is_empty());
    // Within one batch too: the copy after the dropped one goes with it.
    let mut h = Harness::new(cfg());
    let mut store = LocalStore::new();
    let o = h.run(
        &mut store,
        SEC,
        &[frags[0].clone(), frags[1].clone(), frags[1].clone()],
        &[1],
    );
    assert_eq!(o.dropped, [false, true, true]);
    // After the timeout the identification is free again.
    h.r.on_timers(SEC + 61 * SEC, &mut store).unwrap();
    assert_eq!(store.len(), 0);
    let o = h.run(&mut store, 62 * SEC, &frags, &[]);
    assert_eq!(o.dropped, [false, false]);
    assert_eq!(o.datagrams.len(), 1);
}

#[test]
fn malformed_fragments_are_dropped_and_block_their_datagram() {
    let cases: [(&str, Vec<Vec<u8>>); 4] = [
        ("empty", vec![raw4(1, 8, true, b"")]),
        (
            "past 65,535 bytes",
            vec![
                raw4(2, 0, true, b"\x00\x01\x00\x02\xff\xff\x00\x00abcdefgh"),
                raw4(2, 65_528, false, &[0; 16]),
            ],
        ),
        (
            "two ends",
            vec![raw4(3, 16, false, &[0; 8]), raw4(3, 8, false, &[0; 8])],
        ),
        (
            "bytes past the end",
            vec![raw4(4, 8, false, &[0; 8]), raw4(4, 16, true, &[0; 8])],
        ),
    ];
    for (what, frames) in cases {
        let mut h = Harness::new(cfg());
        let mut store = LocalStore::new();
        let o = h.run(&mut store, SEC, &frames, &[]);
        assert!(
            o.dropped.last().copied().unwrap(),
            "{what}: {:?}",
            o.dropped
        );
        assert!(o.datagrams.is_empty(), "{what}");
        assert!(
            counter(&h.r, "reassembly_fragment_malformed") >= 1,
            "{what}"
        );
    }
    // A non-last IPv4 fragment counts its bytes up to a multiple of 8, as
    // Linux does.
    let mut h = Harness::new(cfg());
    let mut store = LocalStore::new();
    let f0 = raw4(5, 0, true, b"\x00\x01\x00\x02\x00\x18\x00\x00ABCDEFGHxyz");
    let f1 = raw4(5, 16, false, b"IJKLMNOP");
    let o = h.run(&mut store, SEC, &[f0, f1], &[]);
    assert_eq!(o.dropped, [false, false]);
    assert_eq!(payload(&o.datagrams[0].1), b"ABCDEFGHIJKLMNOP");
}

#[test]
fn a_datagram_over_its_fragment_limit_is_blocked() {
    let data = vec![7u8; 64];
    let whole = udp_v4(C, S, 4000, 53, &data);
    let frags = frag4(&whole, &[8, 16, 24, 32], 21);
    let mut h = Harness::new(Config {
        max_fragments: 3,
        ..cfg()
    });
    let mut store = LocalStore::new();
    let o = h.run(&mut store, SEC, &frags, &[]);
    assert_eq!(o.dropped, [false, false, false, true, true]);
    assert!(o.datagrams.is_empty());
    assert_eq!(counter(&h.r, "reassembly_fragment_limit_drops"), 1);
    assert_eq!(counter(&h.r, "reassembly_fragment_blocked"), 1);
}

#[test]
fn a_datagram_is_forgotten_after_its_timeout() {
    let data = b"0123456789abcdef0123456789abcdef".to_vec();
    let whole = udp_v4(C, S, 4000, 53, &data);
    let frags = frag4(&whole, &[16], 31);
    let mut h = Harness::new(Config {
        fragment_timeout_secs: 30,
        ..cfg()
    });
    let mut store = LocalStore::new();
    h.run(&mut store, SEC, &[frags[0].clone()], &[]);
    assert!(!store.is_empty());
    // Before the timeout nothing goes; at it, the record and its pieces.
    h.r.on_timers(30 * SEC, &mut store).unwrap();
    assert!(!store.is_empty());
    h.r.on_timers(31 * SEC, &mut store).unwrap();
    assert_eq!(store.len(), 0);
    assert_eq!(counter(&h.r, "reassembly_fragments_expired"), 1);
    // The second fragment alone completes nothing.
    let o = h.run(&mut store, 32 * SEC, &[frags[1].clone()], &[]);
    assert!(o.datagrams.is_empty());
    // Past the timeout a record not yet removed is not joined either.
    let mut h = Harness::new(Config {
        fragment_timeout_secs: 30,
        ..cfg()
    });
    let mut store = LocalStore::new();
    h.run(&mut store, SEC, &[frags[0].clone()], &[]);
    let o = h.run(&mut store, 32 * SEC, &[frags[1].clone()], &[]);
    assert!(o.datagrams.is_empty());
}

#[test]
fn datagrams_of_other_sources_and_identifications_are_not_mixed() {
    let a = udp_v4(C, S, 4000, 53, b"AAAAAAAAAAAAAAAAAAAAAAAA");
    let b = udp_v4([10, 0, 0, 9], S, 4000, 53, b"BBBBBBBBBBBBBBBBBBBBBBBB");
    let c = udp_v4(C, S, 4000, 53, b"CCCCCCCCCCCCCCCCCCCCCCCC");
    let fa = frag4(&a, &[16], 5);
    let fb = frag4(&b, &[16], 5);
    let fc = frag4(&c, &[16], 6);
    let mut h = Harness::new(cfg());
    let mut store = LocalStore::new();
    let o = h.run(
        &mut store,
        SEC,
        &[
            fa[0].clone(),
            fb[1].clone(),
            fc[0].clone(),
            fb[0].clone(),
            fc[1].clone(),
            fa[1].clone(),
        ],
        &[],
    );
    let got: Vec<(u32, Vec<u8>)> = o.datagrams.iter().map(|(i, d)| (*i, payload(d))).collect();
    assert_eq!(
        got,
        vec![
            (3, b"BBBBBBBBBBBBBBBBBBBBBBBB".to_vec()),
            (4, b"CCCCCCCCCCCCCCCCCCCCCCCC".to_vec()),
            (5, b"AAAAAAAAAAAAAAAAAAAAAAAA".to_vec()),
        ]
    );
}

#[test]
fn policies_drop_inspect_and_reassemble() {
    let whole = udp_v4(C, S, 4000, 53, &[1; 32]);
    let frags = frag4(&whole, &[16], 41);
    let mut h = Harness::new(Config::default());
    let mut store = LocalStore::new();
    let o = h.run(&mut store, SEC, &frags, &[]);
    assert_eq!(
        o.dropped,
        [true, true],
        "UDP fragments are dropped by default"
    );
    let mut h = Harness::new(Config {
        udp_fragments: Fragments::Inspect,
        ..Config::default()
    });
    let o = h.run(&mut store, SEC, &frags, &[]);
    assert_eq!(o.dropped, [false, false]);
    assert!(o.datagrams.is_empty() && store.is_empty());
    // `tcp_fragments` has no `reassemble`: a configuration saying so is refused.
    let e = serde_json_like("tcp_fragments: reassemble");
    assert!(e.contains("unknown variant `reassemble`"), "{e}");
}

/// The error deserialising a reassembly configuration gives.
fn serde_json_like(yaml: &str) -> String {
    match yaml_serde::from_str::<Config>(yaml) {
        Ok(_) => String::new(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn fragments_racing_on_two_instances_are_decided_again_and_never_pass_unseen() {
    let data = b"0123456789abcdefEVIL456789abcdef".to_vec();
    let whole = udp_v4(C, S, 4000, 53, &data);
    let frags = frag4(&whole, &[8, 16, 24], 51);
    let shared = SharedLocalStore::new();
    // Instance B takes fragments 1 and 2 while instance A, having read the
    // record, takes fragment 0.
    let b = std::sync::Arc::new(std::sync::Mutex::new(Harness::new(cfg())));
    let b_out = std::sync::Arc::new(std::sync::Mutex::new(None));
    let (bh, bo, mut bs, bf) = (
        b.clone(),
        b_out.clone(),
        shared.handle(),
        frags[1..3].to_vec(),
    );
    // B acts after A's first round trip (the record read), before its second.
    let mut store = sluice_state::testing::Interleave {
        inner: shared.handle(),
        calls: 0,
        at: 2,
        hook: Some(Box::new(move || {
            let o = bh.lock().unwrap().run(&mut bs, SEC, &bf, &[]);
            *bo.lock().unwrap() = Some(o);
        })),
    };
    let mut a = Harness::new(cfg());
    let oa = a.run(&mut store, SEC, std::slice::from_ref(&frags[0]), &[]);
    let ob = b_out.lock().unwrap().take().unwrap();
    // B's pieces were recorded; A's record changed under it, so A decided
    // its fragment again on what B recorded, and it passes, recorded.
    assert_eq!(ob.dropped, [false, false]);
    assert_eq!(oa.dropped, [false]);
    assert_eq!(counter(&a.r, "reassembly_fragment_race_retries"), 1);
    assert_eq!(counter(&a.r, "reassembly_fragment_races"), 0);
    // The last fragment, at either instance, completes the datagram from
    // all three recorded pieces.
    let mut sb = shared.handle();
    let o = b
        .lock()
        .unwrap()
        .run(&mut sb, SEC + 1, std::slice::from_ref(&frags[3]), &[]);
    assert_eq!(o.dropped, [false]);
    assert_eq!(payload(&o.datagrams[0].1), data);
}

/// A store on which another instance changes the records before every
/// compare-and-set round trip of this one (the even `execute` calls), and
/// which records, per call, whether it wrote pieces and swapped records.
/// Whether it applies a call in order across keys is `ordered` (a cluster
/// does not).
struct Contended {
    inner: sluice_state::SharedLocalStore,
    calls: Vec<(bool, bool)>,
    hook: Box<dyn FnMut()>,
    ordered: bool,
}

impl Contended {
    fn new(inner: sluice_state::SharedLocalStore, hook: Box<dyn FnMut()>) -> Self {
        Contended {
            inner,
            calls: Vec::new(),
            hook,
            ordered: true,
        }
    }
}

impl StateStore for Contended {
    fn execute(&mut self, ops: &mut sluice_state::Ops) -> Result<(), sluice_state::StoreError> {
        use sluice_reassembly::defrag::{TABLE_FRAG, TABLE_FRAG_PIECE};
        use sluice_state::Op;
        let puts = ops
            .ops()
            .iter()
            .any(|o| matches!(o, Op::Put { key, .. } if key.table() == TABLE_FRAG_PIECE));
        let swaps = ops
            .ops()
            .iter()
            .any(|o| matches!(o, Op::CompareAndSet { key, .. } if key.table() == TABLE_FRAG));
        self.calls.push((puts, swaps));
        if self.calls.len().is_multiple_of(2) {
            (self.hook)();
        }
        self.inner.execute(ops)
    }
    fn take_expired(
        &mut self,
        ns: sluice_state::Namespace,
        now: u64,
        max: usize,
        out: &mut Vec<sluice_state::Key>,
    ) -> Result<(), sluice_state::StoreError> {
        self.inner.take_expired(ns, now, max, out)
    }
    fn counters(&self) -> sluice_state::StoreCounters {
        self.inner.counters()
    }
    fn orders_across_keys(&self) -> bool {
        self.ordered
    }
    fn describe(&self) -> String {
        "contended".into()
    }
}

#[test]
fn a_store_unordered_across_keys_has_the_pieces_before_the_record_names_them() {
    let data = b"0123456789abcdef0123456789abcdefXYZ".to_vec();
    let whole = udp_v4(C, S, 4000, 9999, &data);
    let frags = frag4(&whole, &[16, 32], 9);
    for ordered in [true, false] {
        let shared = SharedLocalStore::new();
        let mut s = Contended::new(shared.handle(), Box::new(|| {}));
        s.ordered = ordered;
        let (mut a, mut b) = (Harness::new(cfg()), Harness::new(cfg()));
        a.run(&mut s, SEC, &[frags[0].clone()], &[]);
        b.run(&mut s, SEC + 1, &[frags[2].clone()], &[]);
        let o = a.run(&mut s, SEC + 2, &[frags[1].clone()], &[]);
        assert_eq!(o.dropped, [false]);
        assert_eq!(payload(&o.datagrams[0].1), data);
        // The first two batches wrote a piece and swapped the record (the
        // third completes the datagram, its bytes are not stored). One
        // pipeline in order takes both in one call; otherwise the pieces are
        // written (and acknowledged) a call before the swap that names them.
        let mixed = s.calls.iter().filter(|c| c.0 && c.1).count();
        let apart = s
            .calls
            .windows(2)
            .filter(|w| w[0] == (true, false) && w[1].1)
            .count();
        if ordered {
            assert_eq!((mixed, apart), (2, 0), "{:?}", s.calls);
        } else {
            assert_eq!((mixed, apart), (0, 2), "{:?}", s.calls);
        }
    }
}

#[test]
fn a_record_changing_under_every_retry_drops_the_fragments_after_the_last() {
    let data = b"0123456789abcdefEVIL456789abcdef".to_vec();
    let whole = udp_v4(C, S, 4000, 53, &data);
    let frags = frag4(&whole, &[8, 16, 24], 52);
    let shared = SharedLocalStore::new();
    let mut b = Harness::new(cfg());
    let mut bs = shared.handle();
    let dup = frags[1].clone();
    let b_dropped = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = b_dropped.clone();
    // B records a copy of fragment 1 each time: the record's fragment count
    // changes, its bytes do not.
    let mut store = Contended::new(
        shared.handle(),
        Box::new(move || {
            let o = b.run(&mut bs, SEC, std::slice::from_ref(&dup), &[]);
            seen.lock().unwrap().extend(o.dropped);
        }),
    );
    let mut a = Harness::new(cfg());
    let oa = a.run(&mut store, SEC, &[frags[0].clone(), frags[2].clone()], &[]);
    // Four rounds, all lost: A's fragments are dropped, never passed with
    // their bytes unrecorded.
    assert_eq!(oa.dropped, [true, true]);
    assert_eq!(counter(&a.r, "reassembly_fragment_race_retries"), 3);
    assert_eq!(counter(&a.r, "reassembly_fragment_races"), 2);
    assert_eq!(*b_dropped.lock().unwrap(), [false; 4]);
    // What is recorded is B's piece alone: A's bytes were never written,
    // so fragments 0, 2 and 3 sent again complete the datagram from them.
    let mut sa = shared.handle();
    let o = a.run(
        &mut sa,
        SEC + 1,
        &[frags[0].clone(), frags[2].clone(), frags[3].clone()],
        &[],
    );
    assert_eq!(o.dropped, [false, false, false]);
    assert_eq!(payload(&o.datagrams[0].1), data);
}
