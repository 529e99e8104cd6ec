//! Network-aware distribution in the reconciler, on a simulated clock: two
//! racks of two hosts, the clients in rack `a`, the service in both.

use super::*;
use crate::distribution::Distribution;
use crate::reconcile::distribution::REDISTRIBUTE_EVERY;
use sluice_proto::HostCapacity;

const RACKED: &str = "tenant: t
elements:
  clients: { type: service, vms: { c1: 10.0.0.1 } }
  web: { type: service, vms: { w1: 10.0.1.1, w2: 10.0.1.2, w3: 10.0.1.3 } }
  fw: { type: middlebox, function: monitor, instances: 2 }
  ids: { type: middlebox, function: monitor, instances: 2 }
chains:
  - { name: c, path: [clients, fw, ids, web] }
";

fn rack(h: u32) -> &'static str {
    if h <= 2 {
        "a"
    } else {
        "b"
    }
}

/// Host `h` heartbeats with its rack, reporting `chains`.
fn beat_racked(s: &mut Sim, h: u32, chains: Vec<ChainMeasure>) {
    beat_racked_with(s, h, |hb| hb.chains = chains);
}

/// Host `h` heartbeats with its rack, and what `fill` adds.
fn beat_racked_with(s: &mut Sim, h: u32, fill: impl FnOnce(&mut HostHeartbeat)) {
    let mut hb = s.heartbeat_of(h);
    hb.registration.capacity = Some(HostCapacity {
        rack: Some(rack(h).into()),
        ..HostCapacity::default()
    });
    fill(&mut hb);
    s.r.heartbeat(
        Heartbeat {
            hb,
            pinned: None,
            reports_health: false,
        },
        s.now,
    )
    .unwrap();
}

/// Four hosts in two racks; c1 on host 1 (rack a), w1 on host 2 (a), w2 and
/// w3 on hosts 3 and 4 (b); the spec applied under `distribution`. Rack-aware
/// placement puts one instance of each middlebox in each rack (half the
/// chain's VMs are in each).
fn racked(distribution: Distribution) -> Sim {
    let store = MemoryStore::new();
    let now = Instant::now();
    let mut r = Reconciler::start(Box::new(store.clone()), "local", now, EPOCH_MS).unwrap();
    r.desired.distribution = distribution;
    let mut s = Sim {
        r,
        store,
        now,
        running: BTreeMap::new(),
    };
    for h in 1..=4 {
        beat_racked(&mut s, h, Vec::new());
    }
    s.ok("PUT", "/v1/vms/t/c1", &vm("c1", 1, "10.0.0.1"));
    s.ok("PUT", "/v1/vms/t/w1", &vm("w1", 2, "10.0.1.1"));
    s.ok("PUT", "/v1/vms/t/w2", &vm("w2", 3, "10.0.1.2"));
    s.ok("PUT", "/v1/vms/t/w3", &vm("w3", 4, "10.0.1.3"));
    s.ok("POST", "/v1/tenants", RACKED);
    s.push_all();
    s
}

/// The racks of a middlebox's instances in group order, with their weights.
fn layout(s: &Sim, mb: &str) -> Vec<(&'static str, u32)> {
    let p = s.r.desired().placement("t").unwrap();
    let list = &p.instances[mb];
    list.iter()
        .map(|hp| (rack(hp.0 .0), p.weight(list, *hp)))
        .collect()
}

/// Rack `a`'s part of a middlebox's hash space.
fn share_a(s: &Sim, mb: &str) -> f64 {
    let l = layout(s, mb);
    let total: u32 = l.iter().map(|x| x.1).sum();
    let a: u32 = l.iter().filter(|x| x.0 == "a").map(|x| x.1).sum();
    f64::from(a) / f64::from(total)
}

/// Cumulative chain counters: `fwd` bytes of requests entered at host 1 (c1),
/// `rev` bytes of replies entered at hosts 2, 3 and 4 (w1, w2, w3) each.
fn traffic(s: &mut Sim, fwd: u64, rev: u64) {
    let vni = s.r.desired().tenants["t"].vni;
    let m = |chain: u16, bytes: u64| ChainMeasure {
        vni,
        chain,
        packets: bytes / 1000,
        bytes,
        syns: 0,
        handshakes: 0,
        handshake_ns: 0,
        unanswered: 0,
        latency: Default::default(),
    };
    beat_racked(s, 1, vec![m(0, fwd)]);
    beat_racked(s, 2, vec![m(1, rev)]);
    beat_racked(s, 3, vec![m(1, rev)]);
    beat_racked(s, 4, vec![m(1, rev)]);
}

#[test]
fn uniform_distribution_keeps_placement_order_and_even_weights() {
    let mut s = racked(Distribution::Uniform);
    for mb in ["fw", "ids"] {
        let l = layout(&s, mb);
        assert_eq!(l.len(), 2);
        assert!(
            l.iter().all(|x| x.1 == crate::desired::BASE_WEIGHT),
            "{l:?}"
        );
    }
    traffic(&mut s, 1_000_000, 8_000_000);
    s.run(REDISTRIBUTE_EVERY * 3);
    assert!(s.events("distribution").is_empty());
    assert!(s.r.desired().shares.is_empty());
}

#[test]
fn network_aware_lays_groups_out_by_rack_and_moves_shares_to_the_traffic() {
    let mut s = racked(Distribution::NetworkAware);
    // One split per middlebox (`--distribution-classes false`); classes:
    // the next test.
    s.r.set_distribution_classes(false);
    for mb in ["fw", "ids"] {
        let racks: Vec<&str> = layout(&s, mb).iter().map(|x| x.0).collect();
        assert_eq!(racks, ["a", "b"], "{mb}: rack a's instances first");
    }
    // The first solution, before anything was measured, stands on where the
    // VMs are: the clients in rack a, the service in both.
    s.run(20 * MS);
    let first = s.events("distribution");
    assert_eq!(first.len(), 1, "{first:?}");
    let before = share_a(&s, "fw");
    assert!(before > 0.5, "{before}");
    // Measured: requests from rack a, replies from both racks (a third from
    // rack a), 8x the bytes.
    let mut fwd = 0;
    let mut rev = 0;
    for _ in 0..3 {
        fwd += 10_000_000;
        rev += 80_000_000;
        traffic(&mut s, fwd, rev);
        s.run(REDISTRIBUTE_EVERY);
    }
    for mb in ["fw", "ids"] {
        let a = share_a(&s, mb);
        assert!(a > 0.5 + 1e-3, "{mb}: rack a's share {a}");
        // At most the default slack over the even share.
        assert!(
            a <= 0.5 * (1.0 + crate::distribution::DEFAULT_SLACK) + 0.02,
            "{mb}: {a}"
        );
    }
    // The two middleboxes' rack-a ranges line up: flows stay in their rack
    // between them.
    assert!((share_a(&s, "fw") - share_a(&s, "ids")).abs() < 0.02);
    let d = &s.r.distributions()["t"];
    assert_eq!(d.racks, ["a", "b"]);
    assert!(d.predicted_worst <= d.even_worst, "{d:?}");
    // The decision is on /metrics too.
    let m = crate::metrics::render(&s.r, s.now, false);
    for want in [
        "sluice_controller_distribution_worst_uplink{tenant=\"t\",split=\"installed\"}",
        "sluice_controller_distribution_uplink_bytes_per_second{tenant=\"t\",rack=\"b\",direction=\"down\"}",
    ] {
        assert!(m.contains(want), "{want} in {m}");
    }
    // The same traffic again: nothing better to move flows for.
    let n = s.events("distribution").len();
    for _ in 0..3 {
        fwd += 10_000_000;
        rev += 80_000_000;
        traffic(&mut s, fwd, rev);
        s.run(REDISTRIBUTE_EVERY);
    }
    assert_eq!(s.events("distribution").len(), n, "hysteresis");
    // Every host runs the shares: the configuration changed and was pushed.
    let pushed = s.push_all();
    let _ = pushed;
    let cfg = &s.r.configs()[&1];
    assert!(cfg.tenants.iter().any(|t| !t.groups.is_empty()));
}

/// Rack `a`'s part of a class's split of a middlebox's flows.
fn class_share_a(s: &Sim, mb: &str, class: &str) -> f64 {
    let p = s.r.desired().placement("t").unwrap();
    let w = &p.classes[mb][class];
    let total: u32 = w.values().sum();
    let a: u32 = w
        .iter()
        .filter(|(hp, _)| rack(hp.0 .0) == "a")
        .map(|x| x.1)
        .sum();
    f64::from(a) / f64::from(total)
}

#[test]
fn flows_to_each_racks_servers_get_a_split_of_their_own() {
    let mut s = racked(Distribution::NetworkAware);
    let mut fwd = 0;
    let mut rev = 0;
    for _ in 0..3 {
        fwd += 10_000_000;
        rev += 80_000_000;
        traffic(&mut s, fwd, rev);
        s.run(REDISTRIBUTE_EVERY);
    }
    // The flows to w1 (rack a) stay in rack a; those to w2 and w3 (rack b)
    // cross racks once whichever instances they take, so they take rack
    // b's: each middlebox's instances share the load evenly, where one
    // split per middlebox left rack b's idle (the test above).
    for mb in ["fw", "ids"] {
        let to_a = class_share_a(&s, mb, "a");
        let to_b = class_share_a(&s, mb, "b");
        assert!(to_a > 0.99, "{mb}: {to_a}");
        assert!(to_b < 0.5, "{mb}: {to_b}");
        let own = share_a(&s, mb);
        assert!((own - 0.5).abs() < 0.02, "{mb}: its own split {own}");
    }
    let ev = s.events("distribution");
    assert!(
        ev.iter()
            .any(|e| e.reason.contains("flows to rack b's servers")),
        "{ev:?}"
    );
    // `sluice get placement` shows each instance's part of each class.
    let infos = crate::resources::hosts::placement_infos(s.r.desired(), Some("t"));
    for i in infos.iter().filter(|i| i.middlebox == "ids") {
        let a = i.class_shares["a"];
        let want_a = if i.rack.as_deref() == Some("a") {
            1.0
        } else {
            0.0
        };
        assert!((a - want_a).abs() < 0.01, "{i:?}");
        assert!(i.class_shares.contains_key("b"), "{i:?}");
    }
    // The switch selects a class's group by the server's address, at every
    // middlebox hop, in both directions.
    let c = s.r.desired().compile_tenant("t").unwrap();
    let gb = c.class_groups[&("ids".to_string(), "b".to_string())];
    let w2: sluice_chain::Prefix = "10.0.1.2/32".parse().unwrap();
    let mut fwd_sel = 0;
    let mut rev_sel = 0;
    for hf in c.hosts.values() {
        for e in &hf.entries {
            if !e.actions.contains(&sluice_switch::Action::Select(gb)) {
                continue;
            }
            if e.m.dst == Some(w2) {
                fwd_sel += 1;
            }
            if e.m.src == Some(w2) {
                rev_sel += 1;
            }
        }
        if hf
            .entries
            .iter()
            .any(|e| e.actions.contains(&sluice_switch::Action::Select(gb)))
        {
            assert!(hf.groups.contains_key(&gb));
        }
    }
    assert!(fwd_sel > 0 && rev_sel > 0, "{fwd_sel} {rev_sel}");
    // Pushed to the agents with the rest.
    s.push_all();
    let cfg = &s.r.configs()[&1];
    assert!(cfg
        .tenants
        .iter()
        .any(|t| t.groups.iter().any(|(id, _)| *id == gb.0)));
    // Off again: the classes' groups go with the next solution.
    s.r.set_distribution_classes(false);
    for _ in 0..2 {
        fwd += 10_000_000;
        rev += 80_000_000;
        traffic(&mut s, fwd, rev);
        s.run(REDISTRIBUTE_EVERY);
    }
    assert!(s.r.desired().class_shares.is_empty());
    assert!(s
        .r
        .desired()
        .compile_tenant("t")
        .unwrap()
        .class_groups
        .is_empty());
}

#[test]
fn a_lost_rack_instance_is_solved_again() {
    let mut s = racked(Distribution::NetworkAware);
    s.run(20 * MS);
    let n = s.events("distribution").len();
    // fw's rack-a instance goes down: the installed shares give rack a a
    // share it can no longer serve, so the next solution is adopted at once
    // (not held back by hysteresis), and gives rack b all of fw.
    let fw = ("t".to_string(), "fw".to_string());
    assert!(s.r.desired().shares[&fw]["a"] > 0);
    let key =
        s.r.desired()
            .instances
            .iter()
            .find(|(k, i)| k.1 == "fw" && rack(i.host) == "a")
            .map(|(k, _)| k.clone())
            .unwrap();
    s.r.desired.down.insert(key);
    s.run(REDISTRIBUTE_EVERY);
    assert_eq!(s.events("distribution").len(), n + 1);
    let shares = &s.r.desired().shares[&fw];
    assert_eq!(shares.get("a").copied().unwrap_or(0), 0, "{shares:?}");
    assert_eq!(shares["b"], crate::distribution::PPM, "{shares:?}");
}

#[test]
fn declared_uplinks_move_shares_only_past_the_target_and_back() {
    let mut s = racked(Distribution::NetworkAware);
    s.r.set_distribution_classes(false);
    // 80 Mbit/s uplinks (10 MB/s), half of which is the target.
    s.r.set_uplinks(
        [("a", 10e6), ("b", 10e6)]
            .map(|(k, v)| (k.to_string(), v))
            .into(),
    );
    s.r.set_uplink_target(0.5);
    // Light traffic (100 kB/s of requests, 800 kB/s of replies): the even
    // split crosses a few percent of an uplink, so the shares stay even.
    let (mut fwd, mut rev) = (0, 0);
    let mut step = |s: &mut Sim, f: u64, r: u64| {
        fwd += f;
        rev += r;
        traffic(s, fwd, rev);
        s.run(REDISTRIBUTE_EVERY);
    };
    for _ in 0..3 {
        step(&mut s, 500_000, 4_000_000);
    }
    for mb in ["fw", "ids"] {
        let a = share_a(&s, mb);
        assert!((a - 0.5).abs() < 0.01, "{mb}: even below the target, {a}");
    }
    // Heavy traffic (2 MB/s of requests, 16 MB/s of replies per web VM):
    // the even split overloads the uplinks, rack a takes more.
    for _ in 0..3 {
        step(&mut s, 10_000_000, 80_000_000);
    }
    for mb in ["fw", "ids"] {
        let a = share_a(&s, mb);
        assert!(a > 0.5 + 1e-3, "{mb}: relieved past the target, {a}");
    }
    let m = crate::metrics::render(&s.r, s.now, false);
    assert!(
        m.contains("sluice_controller_distribution_uplink_target 0.5"),
        "{m}"
    );
    let imbalance = m
        .lines()
        .find_map(|l| l.strip_prefix("sluice_controller_distribution_imbalance{tenant=\"t\"} "))
        .and_then(|v| v.parse::<f64>().ok())
        .expect("the imbalance is on /metrics");
    assert!(imbalance > 0.0, "{imbalance}");
    let events = s.events("distribution");
    assert!(
        events.iter().any(|e| e.reason.contains("target 50%")),
        "{events:?}"
    );
    // Light again: every uplink within its target, the shares go back.
    for _ in 0..3 {
        step(&mut s, 500_000, 4_000_000);
    }
    for mb in ["fw", "ids"] {
        let a = share_a(&s, mb);
        assert!((a - 0.5).abs() < 0.01, "{mb}: back to even, {a}");
    }
}

/// Host `h` heartbeats what it sent each peer: `(peer, packets, bytes)`.
fn beat_peers(s: &mut Sim, h: u32, peers: &[(u32, u64, u64)]) {
    beat_racked_with(s, h, |hb| {
        hb.peers = peers
            .iter()
            .map(|&(host, packets, bytes)| sluice_proto::PeerTraffic {
                host,
                packets,
                bytes,
            })
            .collect()
    });
}

/// The uplinks are measured from what the agents say they sent each peer:
/// only traffic between racks counts, at wire size, out of the sender's
/// rack and into the receiver's; the totals and the utilisation of declared
/// uplinks reach /metrics next to the prediction.
#[test]
fn measured_uplinks_add_up_what_hosts_sent_across_racks() {
    use sluice_proto::FABRIC_WIRE_OVERHEAD as O;
    let mut s = racked(Distribution::NetworkAware);
    s.r.set_uplinks(
        [("a", 10e6), ("b", 10e6)]
            .map(|(k, v)| (k.to_string(), v))
            .into(),
    );
    let sample = crate::traffic::SAMPLE_EVERY * 3 / 2;
    s.run(sample);
    // Host 1 (rack a) to host 2 (a) and to host 3 (b).
    beat_peers(&mut s, 1, &[(2, 1_000, 1_000_000), (3, 100, 100_000)]);
    s.run(sample);
    let a = s.r.measured_uplinks()["a"];
    assert_eq!(a.out_total, 100_000 + 100 * O, "{a:?}");
    assert_eq!(a.in_total, 0);
    beat_peers(&mut s, 1, &[(2, 2_000, 2_000_000), (3, 600, 600_000)]);
    beat_peers(&mut s, 3, &[(1, 50, 5_000)]);
    s.run(sample);
    let u = s.r.measured_uplinks().clone();
    assert_eq!(u["a"].out_total, 600_000 + 600 * O);
    assert_eq!(u["b"].in_total, 600_000 + 600 * O);
    assert_eq!(u["b"].out_total, 5_000 + 50 * O);
    assert_eq!(u["a"].in_total, 5_000 + 50 * O);
    let api = s.ok("GET", "/v1/fabric/uplinks", "");
    assert_eq!(api[0]["rack"], "a", "{api}");
    assert_eq!(api[0]["up_bytes_total"], 600_000 + 600 * O, "{api}");
    assert_eq!(api[1]["down_bytes_total"], 600_000 + 600 * O, "{api}");
    assert_eq!(api[0]["capacity_bytes_per_s"], 10e6, "{api}");
    assert!(api[0]["predicted_up_bytes_per_s"].is_number(), "{api}");
    let m = crate::metrics::render(&s.r, s.now, false);
    let want = format!(
        "sluice_controller_rack_uplink_bytes_total{{rack=\"a\",direction=\"up\"}} {}",
        600_000 + 600 * O
    );
    assert!(m.contains(&want), "{want} in {m}");
    for want in [
        "sluice_controller_rack_uplink_bytes_per_second{rack=\"b\",direction=\"down\",source=\"measured\"}",
        "sluice_controller_rack_uplink_bytes_per_second{rack=\"b\",direction=\"down\",source=\"predicted\"}",
        "sluice_controller_rack_uplink_utilisation{rack=\"a\",source=\"measured\"}",
        "sluice_controller_rack_uplink_utilisation{rack=\"a\",source=\"predicted\"}",
    ] {
        assert!(m.contains(want), "{want} in {m}");
    }
}

/// Hosts may declare their rack's uplink at registration: the largest a
/// rack's hosts declare counts, and the controller's own `rack_uplink` wins
/// for the racks it names.
#[test]
fn hosts_declare_their_rack_uplinks_and_the_operator_overrides() {
    let mut s = racked(Distribution::NetworkAware);
    assert!(s.r.uplink_capacities().is_empty());
    for (h, mbit) in [(1, 1_000), (2, 10_000), (3, 400)] {
        beat_racked_with(&mut s, h, |hb| {
            if let Some(c) = &mut hb.registration.capacity {
                c.rack_uplink_mbit = Some(mbit);
            }
        });
    }
    let caps = s.r.uplink_capacities();
    assert_eq!(caps["a"], 10_000.0 * 1e6 / 8.0, "the largest of rack a's");
    assert_eq!(caps["b"], 400.0 * 1e6 / 8.0);
    s.r.set_uplinks([("b".to_string(), 5e6)].into());
    let caps = s.r.uplink_capacities();
    assert_eq!(caps["b"], 5e6, "the operator's word");
    assert_eq!(caps["a"], 10_000.0 * 1e6 / 8.0);
    let api = s.ok("GET", "/v1/fabric/uplinks", "");
    assert_eq!(api[1]["capacity_bytes_per_s"], 5e6, "{api}");
    // The split is solved against them: declared, so the target applies.
    s.r.set_uplink_target(0.5);
    s.run(REDISTRIBUTE_EVERY * 2);
    assert_eq!(s.r.distributions()["t"].target, Some(0.5));
}
