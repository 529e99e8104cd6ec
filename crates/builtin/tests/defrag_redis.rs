//! IP defragmentation with its state in a real Redis (or Valkey) server and a
//! 3-primary cluster: two IPS instances, each with its own connection, take
//! a datagram's fragments in turn. Every datagram is joined whichever
//! instance holds its pieces; the one carrying the signature is dropped by
//! the instance its last fragment reaches, and stays blocked there and on
//! the other instance. And two instances taking the fragments of the same
//! datagrams at the same time, on two threads, join every datagram once:
//! a batch whose record another changed under it decides it again.

use std::path::Path;

use sluice_chain::{Chain, ChainSpec, Sharing};
use sluice_nf::Event;
use sluice_packet::{Batch, PacketPool, Verdict};
use sluice_state::StateStore;
use sluice_state_redis::server::{RedisCluster, RedisServer};

const SPEC: &str = r#"
name: defrag
functions:
  - type: ips
    rules:
      - 'drop udp any any -> any 53 (msg:"evil"; content:"EVIL"; sid:2;)'
reassembly:
  udp_fragments: reassemble
"#;

fn chain() -> Chain {
    let spec = ChainSpec::from_str(SPEC, Path::new("defrag.yaml")).unwrap();
    Chain::from_spec(
        &spec,
        Path::new("."),
        &sluice_builtin::registry(),
        Sharing::Shared,
    )
    .unwrap()
}

/// Sends each frame as its own batch to instance `k % 2`; what was
/// forwarded, and the alerts' signature ids.
fn run(stores: [Box<dyn StateStore>; 2], frames: &[Vec<u8>]) -> (Vec<bool>, Vec<u32>) {
    let mut stores = stores;
    let mut chains = [chain(), chain()];
    let mut pool = PacketPool::new(8);
    let (mut left, mut sids) = (Vec::new(), Vec::new());
    for (k, f) in frames.iter().enumerate() {
        let i = k % 2;
        let mut b = Batch::with_capacity(1);
        assert!(b.push_frame(&mut pool, f, 1_000_000_000 + k as u64 * 1000, 0));
        chains[i].process(&mut b, stores[i].as_mut());
        left.push(b.pkts[0].verdict == Verdict::Forward);
        b.recycle(&mut pool);
        for e in chains[i].take_events() {
            if let Event::Alert(a) = e {
                sids.push(a.sid);
            }
        }
        let st = chains[i].stats();
        assert_eq!(st.store_errors, 0, "{:?}", st.last_error);
    }
    (left, sids)
}

fn check(open: &dyn Fn() -> Box<dyn StateStore>) {
    let (c, s) = ([10, 0, 0, 1], [10, 0, 0, 2]);
    let mut frames = Vec::new();
    for k in 0..10u16 {
        let word: &[u8] = if k == 4 { b"EVIL" } else { b"GOOD" };
        let payload = [b"abcdef".as_slice(), word, b"xyz"].concat();
        let d = sluice_wire::build::udp_v4(c, s, 40000 + k, 53, &payload);
        let [a, b] = sluice_wire::build::ipv4_fragments(&d, 16, 0x100 + k);
        // The first fragment to one instance, the last to the other.
        frames.push(a);
        frames.push(b);
    }
    // The evil datagram's last fragment again, to either instance.
    let evil_last = frames[9].clone();
    frames.push(evil_last.clone());
    frames.push(evil_last);
    let (left, sids) = run([open(), open()], &frames);
    let dropped: Vec<usize> = (0..left.len()).filter(|&i| !left[i]).collect();
    assert_eq!(dropped, vec![9, 20, 21], "{left:?}");
    assert_eq!(sids, vec![2]);
}

#[test]
fn fragments_split_over_two_instances_on_redis_are_joined_and_blocked() {
    let srv = RedisServer::start(&[]).expect("start redis-server");
    let url = srv.url();
    check(&|| sluice_state_redis::open_store(&url).unwrap());
    concurrent(&url);
}

#[test]
fn fragments_split_over_two_instances_on_a_cluster_are_joined_and_blocked() {
    let cluster = RedisCluster::start(3).expect("start a 3-node cluster");
    let url = cluster.url();
    check(&|| sluice_state_redis::open_store(&url).unwrap());
    concurrent(&url);
}

/// What one instance did: each fragment's datagram and whether it passed,
/// the datagrams it joined, its reassembler's counters.
type Outcome = (Vec<(u16, bool)>, usize, Vec<(&'static str, u64)>);

const EVERY: &str = r#"
name: defrag
functions:
  - type: ips
    rules:
      - 'alert udp any any -> any 53 (msg:"whole"; content:"WHOLE-DATAGRAM"; sid:3;)'
reassembly:
  udp_fragments: reassemble
"#;

/// Two instances on two threads, at the same time: instance 0 takes each
/// datagram's fragments 0 and 2, instance 1 fragments 1 and 3, each pair in
/// a batch of its own. Every datagram is joined exactly once (its signature
/// spans the fragments).
fn concurrent(url: &str) {
    const N: u16 = 400;
    const BATCH: usize = 2;
    let (c, s) = ([10, 0, 0, 1], [10, 0, 0, 2]);
    let mut parts: [Vec<(u16, Vec<u8>)>; 2] = [Vec::new(), Vec::new()];
    for k in 0..N {
        let payload = [b"abcdefgh01234WHOLE-DATAGRAM".as_slice(), &k.to_be_bytes()].concat();
        let d = sluice_wire::build::udp_v4(c, s, 40000 + k, 53, &payload);
        let frags = split4(&d, 0x1000 + k);
        for (j, f) in frags.into_iter().enumerate() {
            parts[j % 2].push((k, f));
        }
    }
    let spec = ChainSpec::from_str(EVERY, Path::new("every.yaml")).unwrap();
    // Both instances start together, so their batches interleave.
    let go = std::sync::Barrier::new(2);
    let results: Vec<Outcome> = std::thread::scope(|scope| {
        let handles: Vec<_> = parts
            .iter()
            .map(|frames| {
                let (spec, go) = (&spec, &go);
                let url = url.to_string();
                scope.spawn(move || {
                    let mut store = sluice_state_redis::open_store(&url).unwrap();
                    let mut chain = Chain::from_spec(
                        spec,
                        Path::new("."),
                        &sluice_builtin::registry(),
                        Sharing::Shared,
                    )
                    .unwrap();
                    let mut pool = PacketPool::new(16);
                    go.wait();
                    let (mut passed, mut joined) = (Vec::new(), 0);
                    for (n, run) in frames.chunks(BATCH).enumerate() {
                        let mut b = Batch::with_capacity(run.len());
                        for (j, (_, f)) in run.iter().enumerate() {
                            let ts = 1_000_000_000 + (n * BATCH + j) as u64 * 1000;
                            assert!(b.push_frame(&mut pool, f, ts, 0));
                        }
                        chain.process(&mut b, store.as_mut());
                        for (j, (k, _)) in run.iter().enumerate() {
                            passed.push((*k, b.pkts[j].verdict == Verdict::Forward));
                        }
                        b.recycle(&mut pool);
                        for e in chain.take_events() {
                            if let Event::Alert(a) = e {
                                assert_eq!(a.sid, 3);
                                joined += 1;
                            }
                        }
                    }
                    let st = chain.stats();
                    assert_eq!(st.store_errors, 0, "{:?}", st.last_error);
                    (passed, joined, st.reassembly_counters)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut whole = vec![true; N as usize];
    for (passed, _, _) in &results {
        for &(k, ok) in passed {
            whole[k as usize] &= ok;
        }
    }
    let joined: usize = results.iter().map(|r| r.1).sum();
    let counter = |name: &str| -> u64 {
        results
            .iter()
            .flat_map(|r| r.2.iter())
            .filter(|(n, _)| *n == name)
            .map(|(_, v)| v)
            .sum()
    };
    let all_passed = whole.iter().filter(|w| **w).count();
    eprintln!(
        "{N} datagrams: {all_passed} passed whole, {joined} joined; race retries {}, fragments lost to races {}, pieces missing {}",
        counter("reassembly_fragment_race_retries"),
        counter("reassembly_fragment_races"),
        counter("reassembly_fragment_lost"),
    );
    // Each instance changes a datagram's record once (its two fragments
    // are in one batch), so a batch loses a datagram's race at most once
    // and its retry succeeds: nothing is dropped, every datagram is joined
    // exactly once, and no completing instance misses a piece the other
    // named in the record (pieces are written before the record, on a
    // cluster in a round trip of their own: the pieces and the record live
    // on different nodes).
    assert_eq!(counter("reassembly_fragment_lost"), 0);
    assert_eq!(counter("reassembly_fragment_races"), 0);
    assert_eq!(all_passed, N as usize);
    assert_eq!(joined, N as usize);
    assert_eq!(counter("reassembly_datagrams"), u64::from(N));
}

/// IPv4 datagram `d` (an Ethernet frame without options) in four
/// fragments with identification `id`, at payload offsets 0, 8, 16 and 24.
fn split4(d: &[u8], id: u16) -> Vec<Vec<u8>> {
    let (hdr, payload) = (&d[..34], &d[34..]);
    let cuts = [0usize, 8, 16, 24, payload.len()];
    (0..4)
        .map(|j| {
            let data = &payload[cuts[j]..cuts[j + 1]];
            let mut v = hdr.to_vec();
            v.extend_from_slice(data);
            v[16..18].copy_from_slice(&((20 + data.len()) as u16).to_be_bytes());
            v[18..20].copy_from_slice(&id.to_be_bytes());
            let more = if j < 3 { 0x2000 } else { 0 };
            v[20..22].copy_from_slice(&(more | (cuts[j] / 8) as u16).to_be_bytes());
            v[24..26].fill(0);
            let sum = sluice_wire::checksum::fold(sluice_wire::checksum::sum(0, &v[14..34]));
            v[24..26].copy_from_slice(&sum.to_be_bytes());
            v
        })
        .collect()
}
