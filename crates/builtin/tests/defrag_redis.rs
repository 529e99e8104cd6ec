//! IP defragmentation with its state in a real Redis (or Valkey) server and a
//! 3-primary cluster: two IPS instances, each with its own connection, take
//! a datagram's fragments in turn. Every datagram is joined whichever
//! instance holds its pieces; the one carrying the signature is dropped by
//! the instance its last fragment reaches, and stays blocked there and on
//! the other instance.

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
}

#[test]
fn fragments_split_over_two_instances_on_a_cluster_are_joined_and_blocked() {
    let cluster = RedisCluster::start(3).expect("start a 3-node cluster");
    let url = cluster.url();
    check(&|| sluice_state_redis::open_store(&url).unwrap());
}
