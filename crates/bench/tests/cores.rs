//! `sluice bench nf --threads`: flows sharded over workers by the
//! direction-invariant hash keep both directions on one worker, so workers
//! with their own state decide every packet as one worker does.

use std::collections::BTreeMap;

use sluice_bench::nf::{firewall_chain, scaling, shard_trace, time_chain_sharded, Options};
use sluice_chain::Sharing;
use sluice_trafficgen::{generate, Trace, TrafficSpec};
use sluice_wire::flow::Side;

/// TCP flows with data both ways (the default half of it from the server).
fn traffic() -> Trace {
    generate(&TrafficSpec {
        flows: 400,
        packets_per_flow: 20,
        concurrency: 32,
        ..Default::default()
    })
}

/// For every flow (canonical key) of `shards`, the workers it was seen on and
/// whether each direction was seen.
fn flows_by_worker(shards: &[Trace]) -> BTreeMap<String, (Vec<usize>, bool, bool)> {
    let mut seen: BTreeMap<String, (Vec<usize>, bool, bool)> = BTreeMap::new();
    for (w, t) in shards.iter().enumerate() {
        for (_, f) in t.iter() {
            let m = sluice_wire::parse::parse_frame(f).expect("generated frames parse");
            let (key, side) = m.flow.canonical();
            let e = seen.entry(format!("{key:?}")).or_default();
            if !e.0.contains(&w) {
                e.0.push(w);
            }
            match side {
                Side::Forward => e.1 = true,
                Side::Reverse => e.2 = true,
            }
        }
    }
    seen
}

#[test]
fn sharding_keeps_both_directions_of_every_flow_on_one_worker() {
    let trace = traffic();
    for workers in [2usize, 3] {
        let shards = shard_trace(&trace, workers);
        assert_eq!(shards.len(), workers);
        assert_eq!(
            shards.iter().map(Trace::len).sum::<usize>(),
            trace.len(),
            "every packet goes to exactly one worker"
        );
        let flows = flows_by_worker(&shards);
        assert_eq!(flows.len(), 400);
        for (flow, (on, fwd, rev)) in &flows {
            assert!(*fwd && *rev, "{flow}: both directions are in the traffic");
            assert_eq!(on.len(), 1, "{flow} is on workers {on:?}");
        }
        // Every worker gets a fair share of the flows.
        for w in 0..workers {
            let n = flows.values().filter(|(on, ..)| on[0] == w).count();
            assert!(n > 400 / workers / 2, "worker {w} has {n} flows of 400");
        }
        // Within a worker, packets keep their order.
        for s in &shards {
            let ts: Vec<u64> = s.iter().map(|(t, _)| t).collect();
            assert!(ts.windows(2).all(|p| p[0] <= p[1]));
        }
    }
}

#[test]
fn workers_with_their_own_firewall_state_forward_what_one_firewall_does() {
    // The rules admit client connections only: every server packet passes on
    // connection tracking alone, so it must meet its SYN's state.
    let dir = tempfile::tempdir().unwrap();
    let trace = traffic();
    let fw = firewall_chain(10);
    let forwarded = |shards: &[Trace]| {
        let run = time_chain_sharded(dir.path(), &fw, Sharing::Shared, shards, 1).unwrap();
        assert_eq!(run.per_worker.len(), shards.len());
        run.stats.iter().map(|s| s.forwarded).sum::<u64>()
    };
    let one = forwarded(&shard_trace(&trace, 1));
    assert_eq!(one, trace.len() as u64, "the traffic is all admitted");
    assert_eq!(forwarded(&shard_trace(&trace, 2)), one);
    assert_eq!(forwarded(&shard_trace(&trace, 3)), one);

    // The control: sharding by a direction-sensitive hash splits flows, and
    // the workers without a flow's SYN drop its replies.
    let mut split = vec![Trace::new(), Trace::new()];
    for (ts, f) in trace.iter() {
        let m = sluice_wire::parse::parse_frame(f).unwrap();
        split[(m.flow.directional_hash() & 1) as usize].push(ts, f);
    }
    assert!(forwarded(&split) < one);
}

#[test]
fn scaling_reports_each_worker_count_against_the_first() {
    let opts = Options {
        packets: 20_000,
        flow_length: 100,
        reps: 1,
        filter: Some("firewall".into()),
        ..Options::default()
    };
    let ms = scaling(&opts, &[1, 2], &mut |_| {});
    let names: Vec<&str> = ms.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["firewall_1000_rules_t1", "firewall_1000_rules_t2"]);
    let (t1, t2) = (&ms[0], &ms[1]);
    assert_eq!(t1.packets, t2.packets);
    assert!(t1.mpps > 0.0 && t2.mpps > 0.0);
    assert_eq!(t2.baseline, "firewall_1000_rules_t1");
    assert!((t2.ratio_to_baseline - t2.mpps / t1.mpps).abs() < 1e-9);
    assert!(t1.note.starts_with("shares 100.0%"), "{}", t1.note);
    assert!(
        t2.note.contains('/') && t2.note.contains("in wall time"),
        "{}",
        t2.note
    );
}
