//! Shards of the data plane ([`super::shard`]) against one data plane: the
//! same configuration, the traffic steered by [`Sharding`], the same
//! decisions and the same counters in sum.

use std::net::SocketAddrV4;

use super::tests::{figure4_host1, heartbeat_from, inst_addr, underlay, with_macs};
use super::tests::{GW_MAC, VIP_A};
use super::*;
use sluice_proto::GENEVE_PORT;
use sluice_switch::tunnel::geneve_header;
use sluice_wire::build;
use sluice_wire::tcp::flags::{ACK, SYN};

type Batch = Vec<(Vec<u8>, Option<SocketAddrV4>)>;

/// Where a batch was received.
#[derive(Debug, Clone, Copy)]
enum In {
    Vm(u16),
    Udp,
}

/// `n` shards of host 1 of the Figure 4 tenant, its instances heard from.
fn shards(n: usize) -> (Vec<Dataplane>, Sharding) {
    let mut dps: Vec<Dataplane> = (0..n)
        .map(|i| {
            let mut d = Dataplane::new(1, &figure4_host1()).unwrap();
            d.set_shard(i, n).unwrap();
            d
        })
        .collect();
    let mut steer = Sharding::new(n);
    for p in [10, 11, 12] {
        deliver(&mut dps, &mut steer, In::Udp, heartbeat_from(p));
    }
    let view = dps[CONTROL_SHARD].health_view();
    for d in &mut dps[1..] {
        d.adopt_health(&view);
    }
    (dps, steer)
}

/// Steers `batch` over the shards (each shard's part in arrival order, as
/// its thread would read it), runs each part and returns every message sent,
/// with where it went, counted as sent.
fn deliver(
    dps: &mut [Dataplane],
    steer: &mut Sharding,
    at: In,
    batch: Batch,
) -> Vec<(Dest, Vec<u8>)> {
    let mut parts: Vec<Batch> = vec![Vec::new(); dps.len()];
    for (f, src) in batch {
        let s = match at {
            In::Vm(_) => steer.of_vm_frame(&f),
            In::Udp => steer.of_datagram(&f),
        };
        parts[s].push((f, src));
    }
    let mut out = Vec::new();
    for (dp, mut part) in dps.iter_mut().zip(parts) {
        if part.is_empty() {
            continue;
        }
        let mut plan = TxPlan::new();
        match at {
            In::Vm(p) => dp.process_vm_batch(p, &part, &mut plan),
            In::Udp => dp.process_udp_batch(&mut part, &mut plan),
        }
        dp.account_sent(&plan.outs, plan.outs.len());
        for o in &plan.outs {
            out.push((o.dest, plan.message(&part, o)));
        }
    }
    out
}

/// A TCP segment of client `i`'s connection to the VIP, from the gateway.
fn client(i: u8, flags: u8) -> Vec<u8> {
    with_macs(
        build::tcp_v4(
            [198, 51, 100, i],
            VIP_A,
            40_000 + u16::from(i),
            80,
            1,
            0,
            flags,
            b"",
        ),
        ROUTER_MAC,
        GW_MAC,
    )
}

/// The Figure 4 chain walked on `n` shards: 48 clients' SYNs and ACKs from
/// the gateway (in one batch, interleaved), then, for three rounds, every
/// message to a local instance handed back by that instance; returns every
/// message sent (sorted) and the counters summed over the shards.
fn walk(n: usize) -> (Vec<(Dest, Vec<u8>)>, Stats) {
    let (mut dps, mut steer) = shards(n);
    let batch: Batch = (1..=48u8)
        .flat_map(|i| [client(i, SYN), client(i, ACK)])
        .map(|f| (f, None))
        .collect();
    let mut sent = deliver(&mut dps, &mut steer, In::Vm(1), batch);
    let mut all = sent.clone();
    for _ in 0..3 {
        // Each instance returns what it got, unchanged, in one batch.
        let back: Batch = sent
            .iter()
            .filter_map(|(d, m)| match d {
                Dest::Udp(a) if *a != SocketAddrV4::new(underlay(2), GENEVE_PORT) => {
                    Some((m.clone(), Some(*a)))
                }
                _ => None,
            })
            .collect();
        sent = deliver(&mut dps, &mut steer, In::Udp, back);
        all.extend(sent.iter().cloned());
    }
    all.sort_by(|a, b| {
        format!("{:?}", a.0)
            .cmp(&format!("{:?}", b.0))
            .then(a.1.cmp(&b.1))
    });
    let mut sum = Stats::default();
    for d in &dps {
        sum.add(d.stats());
    }
    (all, sum)
}

#[test]
fn two_shards_forward_as_one_data_plane_and_their_counters_sum_to_its() {
    let (one, one_stats) = walk(1);
    let (two, two_stats) = walk(2);
    // The walk went somewhere: through local instances and to host 2.
    assert!(one.len() > 200, "{}", one.len());
    assert!(one
        .iter()
        .any(|(d, _)| *d == Dest::Udp(SocketAddrV4::new(underlay(2), GENEVE_PORT))));
    assert!(one.iter().any(|(d, _)| *d == Dest::Udp(inst_addr(11))));
    assert_eq!(one, two, "the same messages to the same places");
    assert_eq!(one_stats, two_stats);
    // Both shards carried flows (the test would pass trivially otherwise).
    let (dps, mut steer) = shards(2);
    let per: Vec<usize> = (0..2)
        .map(|s| {
            (1..=48u8)
                .filter(|&i| steer.of_vm_frame(&client(i, SYN)) == s)
                .count()
        })
        .collect();
    assert!(per.iter().all(|&c| c >= 12), "{per:?}");
    assert_eq!(dps[1].shard(), ShardRole { index: 1, count: 2 });
}

#[test]
fn both_directions_of_a_flow_and_its_geneve_form_meet_on_one_shard() {
    let mut steer = Sharding::new(4);
    let mut seen = [0usize; 4];
    for i in 1..=64u8 {
        let fwd = build::tcp_v4(
            [10, 0, 0, i],
            [10, 0, 9, 1],
            1000 + u16::from(i),
            80,
            1,
            0,
            SYN,
            b"",
        );
        let rev = build::tcp_v4(
            [10, 0, 9, 1],
            [10, 0, 0, i],
            80,
            1000 + u16::from(i),
            1,
            1,
            SYN | ACK,
            b"",
        );
        let s = steer.of_vm_frame(&fwd);
        seen[s] += 1;
        assert_eq!(steer.of_vm_frame(&rev), s, "flow {i}");
        let (h, n) = geneve_header(7, Some((3, 1)));
        let encap = |f: &[u8]| [&h[..n], f].concat();
        assert_eq!(
            steer.of_datagram(&encap(&rev)),
            s,
            "flow {i} from the fabric"
        );
        assert_eq!(
            steer.of_datagram(&encap(&fwd)),
            s,
            "flow {i} from an instance"
        );
    }
    assert!(seen.iter().all(|&c| c > 0), "{seen:?}");
    // What is per host goes to the control shard; what does not parse, too.
    assert_eq!(steer.of_datagram(&heartbeat_from(10)[0].0), CONTROL_SHARD);
    assert_eq!(steer.of_datagram(b"junk"), CONTROL_SHARD);
    assert_eq!(steer.of_vm_frame(b"junk"), CONTROL_SHARD);
    // One shard: everything to it, nothing parsed.
    assert_eq!(Sharding::new(1).of_vm_frame(&client(3, SYN)), 0);
}

#[test]
fn shard_roles_out_of_range_are_refused() {
    let mut d = Dataplane::new(1, &figure4_host1()).unwrap();
    for (i, n) in [(0, 0), (2, 2), (0, MAX_SHARDS + 1)] {
        assert_eq!(d.set_shard(i, n), Err(ShardError { index: i, count: n }));
    }
    assert_eq!(d.shard(), ShardRole::default());
    d.set_shard(1, 2).unwrap();
    // A new configuration on the same thread keeps its role.
    let mut next = Dataplane::new(1, &figure4_host1()).unwrap();
    next.inherit_stats(&d);
    assert_eq!(next.shard(), ShardRole { index: 1, count: 2 });
}

#[test]
fn only_the_control_shard_suspects_and_the_others_follow_its_view() {
    let ms = 1_000_000u64;
    let (mut dps, _) = shards(2);
    for d in dps.iter_mut() {
        d.set_suspect_after(30 * ms);
        d.set_now(990 * ms);
    }
    // Fresh heartbeats at 1000 ms reach the control shard only; the other
    // took the view that has them.
    let mut plan = TxPlan::new();
    dps[0].set_now(1000 * ms);
    for p in [10, 11, 12] {
        dps[0].process_udp_batch(&mut heartbeat_from(p), &mut plan);
    }
    let view = dps[0].health_view();
    dps[1].adopt_health(&view);
    // The follower has no deadline of its own and never suspects.
    assert_eq!(dps[1].next_deadline(), None);
    assert!(!dps[1].suspicion_due(5000 * ms));
    assert!(!dps[1].check_health(5000 * ms, || 5000 * ms));
    assert!(!dps[1].suspected(10));
    // Ports 11 and 12 keep beating; 10 falls silent: the control shard fails
    // it over, and the follower does once it takes the view.
    dps[0].set_now(1020 * ms);
    for p in [11, 12] {
        dps[0].process_udp_batch(&mut heartbeat_from(p), &mut plan);
    }
    assert!(dps[0].check_health(1031 * ms, || 1031 * ms));
    assert!(dps[0].suspected(10));
    assert!(!dps[1].suspected(10));
    let view = dps[0].health_view();
    dps[1].adopt_health(&view);
    assert!(dps[1].suspected(10) && !dps[1].suspected(11));
    // Its traffic for the firewall now leaves for host 2, as the control
    // shard's does.
    let host2 = Dest::Udp(SocketAddrV4::new(underlay(2), GENEVE_PORT));
    for i in 1..=30u8 {
        let mut p = TxPlan::new();
        let batch = vec![(client(i, SYN), None)];
        dps[1].process_vm_batch(1, &batch, &mut p);
        let fw = p
            .outs
            .iter()
            .map(|o| o.dest)
            .find(|d| *d != Dest::Udp(inst_addr(12)));
        assert_eq!(fw, Some(host2), "flow {i}");
    }
}

#[test]
fn sealed_shards_use_their_own_lanes_and_the_receiver_steers_by_counter() {
    // Two shards of host 1 sealing towards host 3 (two_vms routes
    // 10.9.0.0/16 there); host 3's side is checked through Sharding alone.
    let mut cfg = super::tests::two_vms();
    cfg.fabric_auth = Some(super::tests::fabric_keys(1, &[2, 3]));
    let mut dps: Vec<Dataplane> = (0..2)
        .map(|i| {
            let mut d = Dataplane::new(1, &cfg).unwrap();
            d.set_shard(i, 2).unwrap();
            d.set_now(1_000);
            d
        })
        .collect();
    let mut steer = Sharding::new(2);
    let batch: Batch = (1..=40u8)
        .map(|i| {
            let f = build::udp_v4([10, 0, 0, 1], [10, 9, 0, i], 5000, 53, b"q");
            (with_macs(f, ROUTER_MAC, [2, 0, 0, 0, 1, 1]), None)
        })
        .collect();
    // Shard 0's messages come first.
    let on0 = batch
        .iter()
        .filter(|(f, _)| steer.of_vm_frame(f) == 0)
        .count();
    assert!(on0 > 0 && on0 < 40, "{on0}");
    let sent = deliver(&mut dps, &mut steer, In::Vm(1), batch);
    assert_eq!(sent.len(), 40);
    let mut counters = Vec::new();
    for (k, (_, m)) in sent.iter().enumerate() {
        let a = sluice_switch::tunnel::parse_fabric_payload(m)
            .unwrap()
            .auth
            .unwrap();
        assert_eq!(a.lanes, 2);
        let shard = usize::from(k >= on0);
        assert_eq!(a.counter % 2, shard as u64, "each shard seals in its lane");
        // A receiver with as many shards steers it to the sender's shard:
        // the flow's.
        assert_eq!(steer.of_datagram(m), shard);
        counters.push(a.counter);
    }
    let mut unique = counters.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), counters.len(), "no nonce used twice");
}
