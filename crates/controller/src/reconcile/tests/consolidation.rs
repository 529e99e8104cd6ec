//! CoMb's split of a consolidated group in the reconciler, on a simulated
//! clock: the instances' measured CPU and their hosts' declared cores decide
//! each host's share of the group's flows.

use super::*;
use crate::reconcile::consolidation::REBALANCE_EVERY;
use sluice_proto::HostCapacity;

const GROUPED: &str = "tenant: t
elements:
  a: { type: service, vms: { a1: 10.0.0.1 } }
  b: { type: service, vms: { b1: 10.0.0.2 } }
  fw: { type: middlebox, function: firewall, instances: 2, config: { rules: \"default allow\" }, anti_affinity: required }
  mon: { type: middlebox, function: monitor, anti_affinity: required }
chains:
  - { name: ab, path: [a, fw, mon, b] }
consolidate:
  - { name: edge, members: [fw, mon] }
";

/// Host `h` heartbeats declaring `cores`, with its instances' CPU time.
fn beat_cores(s: &mut Sim, h: u32, cores: u32, cpu: &[(&str, u64)]) {
    let cpu: Vec<(String, u64)> = cpu.iter().map(|(n, ms)| (n.to_string(), *ms)).collect();
    beat_in(s, h, cores, None, &cpu);
}

/// Host `h` heartbeats declaring `cores` and `rack`, with its instances'
/// CPU time.
fn beat_in(s: &mut Sim, h: u32, cores: u32, rack: Option<&str>, cpu: &[(String, u64)]) {
    let mut hb = s.heartbeat_of(h);
    hb.registration.capacity = Some(HostCapacity {
        cores: Some(cores),
        rack: rack.map(str::to_string),
        ..HostCapacity::default()
    });
    hb.instances = cpu
        .iter()
        .map(|(name, ms)| InstanceHealth {
            cpu_ms: *ms,
            ..health(name, true, false)
        })
        .collect();
    s.r.heartbeat(
        Heartbeat {
            hb,
            pinned: None,
            reports_health: true,
        },
        s.now,
    )
    .unwrap();
}

#[test]
fn a_consolidated_group_gets_more_of_its_flows_where_the_cores_are() {
    let mut s = Sim::new(GROUPED);
    s.push_all();
    let (h0, _) = s.port("t/edge/0");
    let (h1, _) = s.port("t/edge/1");
    assert_ne!(h0, h1, "anti-affinity: one instance per host");
    // Even weights until something is measured.
    let weights = |s: &Sim| {
        let p = s.r.desired().placement("t").unwrap();
        let list = &p.instances["edge"];
        list.iter()
            .map(|hp| (hp.0 .0, p.weight(list, *hp)))
            .collect::<BTreeMap<u32, u32>>()
    };
    assert_eq!(weights(&s), [(h0, 64), (h1, 64)].into());
    // h0 has 2 cores, h1 6; each instance uses 2 cores (10 s of CPU in 5 s).
    let mut cpu = [0u64, 0];
    let beat = |s: &mut Sim, cpu: [u64; 2]| {
        beat_cores(s, h0, 2, &[("t/edge/0", cpu[0])]);
        beat_cores(s, h1, 6, &[("t/edge/1", cpu[1])]);
    };
    beat(&mut s, cpu);
    s.run(REBALANCE_EVERY);
    assert!(s.events("consolidation").is_empty(), "nothing measured yet");
    for _ in 0..2 {
        cpu = [cpu[0] + 10_000, cpu[1] + 10_000];
        beat(&mut s, cpu);
        s.run(REBALANCE_EVERY);
    }
    // 4 cores of load over 8: a quarter on h0 and three on h1 put both at
    // 50%, where even shares put h0 at 100%.
    let shares = &s.r.desired().comb_shares[&("t".to_string(), "edge".to_string())];
    assert!(
        (f64::from(shares[&h0]) / 1e6 - 0.25).abs() < 1e-3,
        "{shares:?}"
    );
    assert_eq!(weights(&s), [(h0, 32), (h1, 96)].into());
    let ev = s.events("consolidation");
    assert_eq!(ev.len(), 1, "adopted once, then no gain: {ev:?}");
    assert!(
        ev[0].reason.contains("predicted at 50%") && ev[0].reason.contains("even shares 100%"),
        "{}",
        ev[0].reason
    );
    let m = crate::metrics::render(&s.r, s.now, false);
    assert!(
        m.contains(
            "sluice_controller_consolidation_worst_host_utilisation{split=\"installed\"} 0.5"
        ) && m.contains("sluice_controller_consolidation_worst_host_utilisation{split=\"even\"} 1"),
        "{m}"
    );
    // The hosts' groups carry the new weights.
    assert!(!s.push_all().is_empty(), "the new split is pushed");
    let split_1_to_3 = s.r.configs().values().any(|c| {
        c.tenants
            .iter()
            .flat_map(|t| t.groups.iter())
            .any(|(_, g)| {
                let [(b0, _), (b1, _)] = g.ranges[..] else {
                    return false;
                };
                let (x, y) = (b0 as f64, (b1 - b0) as f64);
                (x.min(y) / x.max(y) - 1.0 / 3.0).abs() < 0.01
            })
    });
    assert!(split_1_to_3, "no group splits the hash space 1 : 3");
    // Same load again: no gain, no new split.
    cpu = [cpu[0] + 10_000, cpu[1] + 10_000];
    beat(&mut s, cpu);
    s.run(REBALANCE_EVERY * 2);
    assert_eq!(s.events("consolidation").len(), 1);
}

/// Host `h` (rack `a` for hosts 1-2, `b` for 3-4) heartbeats declaring
/// `cores`, with its instances' CPU time.
fn beat_racked(s: &mut Sim, h: u32, cores: u32, cpu: &[(String, u64)]) {
    beat_in(s, h, cores, Some(if h <= 2 { "a" } else { "b" }), cpu);
}

#[test]
fn under_network_aware_distribution_comb_splits_each_racks_part_by_cores() {
    let store = MemoryStore::new();
    let now = Instant::now();
    let mut r = Reconciler::start(Box::new(store.clone()), "local", now, EPOCH_MS).unwrap();
    r.desired.distribution = crate::distribution::Distribution::NetworkAware;
    let mut s = Sim {
        r,
        store,
        now,
        running: BTreeMap::new(),
    };
    // Rack a: hosts of 2 and 6 cores; rack b: two of 4.
    let cores = [2, 6, 4, 4];
    for h in 1..=4 {
        beat_racked(&mut s, h, cores[h as usize - 1], &[]);
    }
    s.ok("PUT", "/v1/vms/t/a1", &vm("a1", 1, "10.0.0.1"));
    s.ok("PUT", "/v1/vms/t/b1", &vm("b1", 3, "10.0.0.2"));
    s.ok(
        "POST",
        "/v1/tenants",
        &GROUPED.replace("instances: 2,", "instances: 4,"),
    );
    s.push_all();
    s.run(20 * MS);
    let names: Vec<String> = (0..4).map(|i| format!("t/edge/{i}")).collect();
    let host_of: BTreeMap<u32, String> = names.iter().map(|n| (s.port(n).0, n.clone())).collect();
    assert_eq!(host_of.len(), 4, "one instance per host");
    // Each host's share of the group, and each rack's.
    let shares = |s: &Sim| {
        let p = s.r.desired().placement("t").unwrap();
        let list = &p.instances["edge"];
        let total: u32 = list.iter().map(|hp| p.weight(list, *hp)).sum();
        list.iter()
            .map(|hp| (hp.0 .0, f64::from(p.weight(list, *hp)) / f64::from(total)))
            .collect::<BTreeMap<u32, f64>>()
    };
    let rack_a = |w: &BTreeMap<u32, f64>| w[&1] + w[&2];
    let before = shares(&s);
    assert!(
        (before[&1] - before[&2]).abs() < 1e-9,
        "even inside a rack: {before:?}"
    );
    // Every instance uses 1 core (5 s of CPU in 5 s).
    let mut cpu = 0;
    for _ in 0..3 {
        for h in 1..=4 {
            let me = [(host_of[&h].clone(), cpu)];
            beat_racked(&mut s, h, cores[h as usize - 1], &me);
        }
        s.run(REBALANCE_EVERY);
        cpu += 5_000;
    }
    let after = shares(&s);
    // The racks keep the parts the distribution gave them ...
    let racks = crate::consolidation::rack_fractions(
        &["a", "a", "b", "b"],
        s.r.desired()
            .shares
            .get(&("t".to_string(), "edge".to_string())),
    );
    assert!(
        (rack_a(&after) - racks["a"]).abs() < 0.01,
        "{after:?} {racks:?}"
    );
    // ... and inside rack a the 6-core host takes three times the 2-core
    // host's part; rack b's equal hosts stay even.
    assert!((after[&2] / after[&1] - 3.0).abs() < 0.1, "{after:?}");
    assert!((after[&3] - after[&4]).abs() < 0.01, "{after:?}");
    let ev = s.events("consolidation");
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert!(s
        .r
        .desired()
        .comb_shares
        .contains_key(&("t".to_string(), "edge".to_string())));
}
