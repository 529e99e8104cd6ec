use super::super::{
    min_max_load, min_max_load_model_aggregated, NodeFootprint, TrafficClass, FAMILY_COVERAGE,
};
use super::*;
use crate::lp::SolverOptions;

fn class(path: &[NodeId], volume: f64, hyperapp: usize) -> TrafficClass {
    TrafficClass {
        path: path.to_vec(),
        volume,
        hyperapp,
    }
}

fn problem(prov: &[f64], footprints: &[f64], classes: Vec<TrafficClass>) -> NetworkProblem {
    NetworkProblem {
        prov: prov.iter().map(|&p| vec![p]).collect(),
        footprints: footprints.iter().map(|&f| vec![f]).collect(),
        classes,
        node_footprints: Vec::new(),
    }
}

/// Three nodes of capacity 100; A on [0,2], B on [1,2], C on [2], 30 units each.
fn triangle() -> NetworkProblem {
    problem(
        &[100.0; 3],
        &[1.0],
        vec![
            class(&[0, 2], 30.0, 0),
            class(&[1, 2], 30.0, 0),
            class(&[2], 30.0, 0),
        ],
    )
}

/// Every ordered pair of a 6-node line with a chord, three hyperapps, unequal
/// capacities (node 3 small): enough structure for several Newton steps.
fn mesh() -> NetworkProblem {
    let route = |s: usize, d: usize| -> Vec<NodeId> {
        if s < d {
            (s..=d).collect()
        } else {
            (d..=s).rev().collect()
        }
    };
    let mut classes = Vec::new();
    for s in 0..6usize {
        for d in 0..6usize {
            if s != d {
                for h in 0..3 {
                    let v = (1 + (s * 7 + d * 3 + h * 5) % 11) as f64;
                    classes.push(class(&route(s, d), v, h));
                }
            }
        }
    }
    problem(
        &[40.0, 90.0, 60.0, 7.0, 120.0, 30.0],
        &[1.0, 2.5, 0.75],
        classes,
    )
}

/// Deterministic pseudo-random problems (an LCG, no dependency): random simple
/// paths over `n` nodes, random volumes and capacities, some of them zero.
fn random_problem(seed: u64, n: usize) -> NetworkProblem {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = move |m: u64| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) % m
    };
    let prov: Vec<f64> = (0..n)
        .map(|i| if i == 0 { 0.0 } else { (1 + next(100)) as f64 })
        .collect();
    let mut classes = Vec::new();
    for _ in 0..(4 * n) {
        let len = 1 + next(4.min(n as u64)) as usize;
        let mut path: Vec<NodeId> = Vec::new();
        while path.len() < len {
            let v = next(n as u64) as usize;
            if !path.contains(&v) {
                path.push(v);
            }
        }
        // Node 0 has no capacity: it must never be a class's only choice, so it
        // is never an ingress.
        if path == [0] {
            path.push(1);
        }
        if path[0] == 0 {
            path.rotate_left(1);
        }
        let volume = if next(10) == 0 {
            0.0
        } else {
            (1 + next(50)) as f64 / 7.0
        };
        classes.push(class(&path, volume, next(3) as usize));
    }
    problem(&prov, &[1.0, 0.3, 2.0], classes)
}

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / a.abs().max(b.abs()).max(1e-300)
}

/// The LP optimum (per-class and aggregated, which must agree) of `p`.
fn lp(p: &NetworkProblem, strategy: Strategy) -> f64 {
    let full = min_max_load(p, strategy, false).unwrap().max_load;
    let agg = min_max_load_model_aggregated(p, strategy, false)
        .unwrap()
        .solve(&SolverOptions::default())
        .unwrap()
        .max_load;
    assert!(rel(full, agg) < 1e-7, "{full} vs {agg}");
    full
}

/// Checks a max-flow assignment against the LP optimum and for validity: every
/// class's fractions are over its eligible nodes in order, non-negative, sum to
/// 1, leave zero-capacity nodes alone when the class has work, and the loads they
/// give match `load`, reach the optimum and never exceed it.
fn check(p: &NetworkProblem, strategy: Strategy, a: &LoadAssignment, want: f64) {
    assert!(
        rel(a.max_load, want) <= 1e-6,
        "{strategy:?}: flow {} vs LP {want}",
        a.max_load
    );
    let nodes = p.prov.len();
    let table = Footprints::new(&p.footprints, &p.node_footprints, nodes, 1).unwrap();
    let mut load = vec![0.0; nodes];
    for (c, (class, fr)) in p.classes.iter().zip(&a.fractions).enumerate() {
        let eligible = strategy.eligible(&class.path);
        assert_eq!(fr.iter().map(|x| x.0).collect::<Vec<_>>(), eligible, "{c}");
        assert!(fr.iter().all(|x| x.1 >= 0.0 && x.1 <= 1.0), "{c}: {fr:?}");
        let sum: f64 = fr.iter().map(|x| x.1).sum();
        assert!(
            (sum - 1.0).abs() < 1e-9,
            "class {c}: fractions sum to {sum}"
        );
        for &(n, d) in fr {
            let work = class.volume * table.at(class.hyperapp, n)[0];
            if p.prov[n][0] == 0.0 {
                assert!(work == 0.0 || d == 0.0, "class {c} uses empty node {n}");
            } else {
                load[n] += d * work / p.prov[n][0];
            }
        }
    }
    let top = load.iter().copied().fold(0.0, f64::max);
    assert!(rel(top, a.max_load) < 1e-12, "{top} vs {}", a.max_load);
    for (n, (&l, row)) in load.iter().zip(&a.load).enumerate() {
        assert!(
            rel(l, row[0]) < 1e-9 || (l - row[0]).abs() < 1e-12,
            "node {n}"
        );
        assert!(l <= want * (1.0 + 1e-6), "node {n}: load {l} above {want}");
    }
}

#[test]
fn hand_checkable_cases_match_the_lp() {
    // 90 units over three nodes of 100: 0.3 everywhere.
    let p = triangle();
    let a = min_max_load_flow(&p, Strategy::Path, true).unwrap();
    assert!((a.max_load - 0.3).abs() < 1e-12, "{}", a.max_load);
    check(&p, Strategy::Path, &a, lp(&p, Strategy::Path));
    // With A hot (90 units) Ingress leaves it at 0.9, Edge and Path split it 45/45
    // over nodes 0 and 2, and B stays on node 1 (0.3).
    let mut p = triangle();
    p.classes[0].volume = 90.0;
    p.classes[2].volume = 0.0;
    for (strategy, want) in [
        (Strategy::Ingress, 0.9),
        (Strategy::Edge, 0.45),
        (Strategy::Path, 0.45),
    ] {
        let a = min_max_load_flow(&p, strategy, false).unwrap();
        assert!((a.max_load - want).abs() < 1e-12, "{strategy:?}: {a:?}");
        check(&p, strategy, &a, lp(&p, strategy));
    }
    // Hall: node 0 (capacity 10) alone must take A (20 units): load 2, B goes to
    // node 1 entirely although the network as a whole is at 30/40.
    let p = problem(
        &[10.0, 30.0],
        &[1.0],
        vec![class(&[0], 20.0, 0), class(&[0, 1], 10.0, 0)],
    );
    let a = min_max_load_flow(&p, Strategy::Path, false).unwrap();
    assert!((a.max_load - 2.0).abs() < 1e-12);
    assert_eq!(a.fractions[1], vec![(0, 0.0), (1, 1.0)]);
    check(&p, Strategy::Path, &a, lp(&p, Strategy::Path));
    // Three pairs over nodes 0-2 (capacity 1, 2 units each) and a big idle node 3:
    // no single group or node shows it, but {0, 1, 2} holds 6 units on 3 capacity,
    // so the optimum is 2 (found by a cut step from the bound 1).
    let p = problem(
        &[1.0, 1.0, 1.0, 10.0],
        &[1.0],
        vec![
            class(&[0, 1], 2.0, 0),
            class(&[1, 2], 2.0, 0),
            class(&[2, 0], 2.0, 0),
            class(&[3], 1.0, 0),
        ],
    );
    let a = min_max_load_flow(&p, Strategy::Path, false).unwrap();
    assert!((a.max_load - 2.0).abs() < 1e-12, "{a:?}");
    check(&p, Strategy::Path, &a, lp(&p, Strategy::Path));
    let s = min_max_load_transport(&reduce(&p, Strategy::Path).unwrap().transport).unwrap();
    assert!(
        (s.lower_bound - 2.0).abs() < 1e-12 && s.flow_runs == 2,
        "{s:?}"
    );
}

#[test]
fn larger_and_random_instances_match_the_lp() {
    let mut cases = vec![mesh()];
    cases.extend((1..=12).map(|s| random_problem(s, 3 + (s as usize % 9))));
    let mut steps = 0;
    for (i, p) in cases.iter().enumerate() {
        for strategy in [Strategy::Path, Strategy::Edge, Strategy::Ingress] {
            let want = lp(p, strategy);
            let a = min_max_load_flow(p, strategy, false).unwrap();
            check(p, strategy, &a, want);
            // Newton and plain bisection agree on the transportation form.
            let t = reduce(p, strategy).unwrap().transport;
            let newton = min_max_load_transport(&t).unwrap();
            let bisect = min_max_load_transport_with(&t, Search::Bisection).unwrap();
            assert!(
                rel(newton.max_load, bisect.max_load) < 1e-9,
                "case {i} {strategy:?}: {newton:?} vs {bisect:?}"
            );
            assert!(newton.lower_bound <= newton.max_load * (1.0 + 1e-12));
            assert!(newton.max_load <= newton.lower_bound * (1.0 + 1e-9));
            assert!(newton.flow_runs <= 12, "{}", newton.flow_runs);
            assert!(bisect.flow_runs >= newton.flow_runs);
            // The flow-free bounds are often exact already; from the weakest start
            // (the whole network's ratio) the cut steps do all the work.
            let cold = min_max_load_transport_with(&t, Search::NewtonCold).unwrap();
            assert!(
                rel(cold.lower_bound, newton.lower_bound) < 1e-12
                    && rel(cold.max_load, newton.max_load) < 1e-9,
                "case {i} {strategy:?}"
            );
            steps = steps.max(cold.flow_runs);
        }
    }
    assert!(steps >= 3, "no instance needed several cut steps ({steps})");
}

#[test]
fn transport_form_is_exact_and_groups_classes() {
    let p = mesh();
    let t = reduce(&p, Strategy::Path).unwrap().transport;
    // One group per unordered pair of distinct nodes (both directions and all
    // three hyperapps share a node set): 15, from 90 classes.
    assert_eq!(t.groups.len(), 15);
    let s = min_max_load_transport(&t).unwrap();
    for (g, split) in t.groups.iter().zip(&s.splits) {
        assert_eq!(split.iter().map(|x| x.0).collect::<Vec<_>>(), g.eligible);
        assert!((split.iter().map(|x| x.1).sum::<f64>() - 1.0).abs() < 1e-12);
    }
    // The loads reach the max load, which is the certified bound.
    let top = s.load.iter().copied().fold(0.0, f64::max);
    assert_eq!(top, s.max_load);
    assert!(rel(s.max_load, s.lower_bound) < 1e-12, "{s:?}");
    assert!(rel(s.max_load, lp(&p, Strategy::Path)) < 1e-7);
    // Zero work and duplicated nodes are harmless.
    let t = TransportProblem {
        capacity: vec![1.0, 3.0],
        groups: vec![
            WorkGroup {
                eligible: vec![1, 0, 1],
                work: 8.0,
            },
            WorkGroup {
                eligible: vec![1],
                work: 0.0,
            },
            WorkGroup {
                eligible: vec![],
                work: 0.0,
            },
        ],
    };
    let s = min_max_load_transport(&t).unwrap();
    assert!((s.max_load - 2.0).abs() < 1e-12, "{s:?}");
    assert!((s.splits[0][0].1 - 0.75).abs() < 1e-12, "{s:?}");
    assert_eq!(s.splits[0][2].1, 0.0);
    assert_eq!(s.splits[1], vec![(1, 1.0)]);
    assert!(s.splits[2].is_empty());
    let empty = TransportProblem {
        capacity: vec![1.0],
        groups: Vec::new(),
    };
    assert_eq!(min_max_load_transport(&empty).unwrap().max_load, 0.0);
}

#[test]
fn node_dependent_footprints_that_factor_match_the_lp() {
    // A node twice as fast for every hyperapp: a per-node factor.
    let mut p = mesh();
    p.node_footprints = (0..3)
        .map(|h| NodeFootprint {
            node: 2,
            hyperapp: h,
            footprint: vec![p.footprints[h][0] * 0.5],
        })
        .collect();
    let want = lp(&p, Strategy::Path);
    assert!(want < lp(&mesh(), Strategy::Path) - 1e-6);
    check(
        &p,
        Strategy::Path,
        &min_max_load_flow(&p, Strategy::Path, false).unwrap(),
        want,
    );
    // One hyperapp cheaper at a node no other hyperapp reaches with work: the
    // (hyperapp, node) pairs form a tree, which always factors.
    let mut p = problem(
        &[10.0, 10.0, 10.0],
        &[1.0, 1.0],
        vec![class(&[0, 1], 12.0, 0), class(&[1, 2], 12.0, 1)],
    );
    p.node_footprints = vec![NodeFootprint {
        node: 1,
        hyperapp: 0,
        footprint: vec![0.25],
    }];
    let want = lp(&p, Strategy::Path);
    check(
        &p,
        Strategy::Path,
        &min_max_load_flow(&p, Strategy::Path, false).unwrap(),
        want,
    );
    // A zero footprint makes the node free for that class.
    p.node_footprints[0].footprint = vec![0.0];
    let a = min_max_load_flow(&p, Strategy::Path, false).unwrap();
    assert_eq!(a.fractions[0], vec![(0, 0.0), (1, 1.0)]);
    check(&p, Strategy::Path, &a, lp(&p, Strategy::Path));
}

#[test]
fn inputs_it_cannot_solve_exactly_are_rejected() {
    // One hyperapp cheaper at a node that others also use: a generalised flow.
    let mut p = mesh();
    p.node_footprints = vec![NodeFootprint {
        node: 2,
        hyperapp: 1,
        footprint: vec![0.1],
    }];
    let err = min_max_load_flow(&p, Strategy::Path, false).unwrap_err();
    assert!(
        matches!(&err, CombError::NotTransportation(m) if m.contains("hyperapp")),
        "{err}"
    );
    assert!(err.to_string().contains("use the LP"), "{err}");
    assert!(min_max_load(&p, Strategy::Path, false).is_ok());
    // Two resources.
    let mut p = triangle();
    p.prov.iter_mut().for_each(|r| r.push(5.0));
    p.footprints[0].push(1.0);
    let err = min_max_load_flow(&p, Strategy::Path, false).unwrap_err();
    assert!(
        matches!(&err, CombError::NotTransportation(m) if m.contains("2 resources")),
        "{err}"
    );
}

#[test]
fn invalid_inputs_get_clear_errors() {
    let mut p = triangle();
    p.classes[0].volume = f64::NAN;
    assert!(matches!(
        min_max_load_flow(&p, Strategy::Path, false),
        Err(CombError::InvalidVolume { class: 0, .. })
    ));
    let mut p = triangle();
    p.prov[1][0] = f64::NAN;
    assert!(matches!(
        min_max_load_flow(&p, Strategy::Path, false),
        Err(CombError::InvalidCapacity { node: 1, .. })
    ));
    let mut p = triangle();
    p.prov[1][0] = -1.0;
    assert!(matches!(
        min_max_load_flow(&p, Strategy::Path, false),
        Err(CombError::InvalidCapacity { node: 1, .. })
    ));
    let mut p = triangle();
    p.classes[1].path = vec![1, 7];
    assert!(matches!(
        min_max_load_flow(&p, Strategy::Path, false),
        Err(CombError::UnknownNode { node: 7, .. })
    ));
    let mut p = triangle();
    p.footprints[0][0] = f64::INFINITY;
    assert!(matches!(
        min_max_load_flow(&p, Strategy::Path, false),
        Err(CombError::InvalidFootprint { .. })
    ));
    // Zero-capacity nodes take nothing, as in the LP; a class with work and only
    // such nodes has no assignment.
    let mut p = triangle();
    p.prov[2][0] = 0.0;
    let c = p.classes.pop().unwrap();
    let a = min_max_load_flow(&p, Strategy::Path, false).unwrap();
    assert!((a.max_load - 0.3).abs() < 1e-12);
    check(&p, Strategy::Path, &a, lp(&p, Strategy::Path));
    p.classes.push(c);
    let err = min_max_load_flow(&p, Strategy::Path, false).unwrap_err();
    assert_eq!(err, CombError::NoCapacity { class: 2 });
    assert!(err.to_string().contains("class 2"), "{err}");
    assert!(matches!(
        min_max_load(&p, Strategy::Path, false),
        Err(CombError::Infeasible { families }) if families.iter().any(|f| f == FAMILY_COVERAGE)
    ));
    // ... unless it has no volume.
    p.classes[2].volume = 0.0;
    assert!(min_max_load_flow(&p, Strategy::Path, false).is_ok());
    // The transportation form checks its own input.
    let t = |capacity: Vec<f64>, eligible: Vec<NodeId>, work: f64| {
        min_max_load_transport(&TransportProblem {
            capacity,
            groups: vec![WorkGroup { eligible, work }],
        })
    };
    assert_eq!(
        t(vec![1.0], vec![], 1.0).unwrap_err(),
        CombError::NoCapacity { class: 0 }
    );
    assert_eq!(
        t(vec![0.0], vec![0], 1.0).unwrap_err(),
        CombError::NoCapacity { class: 0 }
    );
    assert!(matches!(
        t(vec![1.0], vec![0], f64::NAN),
        Err(CombError::InvalidVolume { class: 0, .. })
    ));
    assert!(matches!(
        t(vec![1.0], vec![0], -1.0),
        Err(CombError::InvalidVolume { class: 0, .. })
    ));
    assert!(matches!(
        t(vec![f64::NAN], vec![0], 1.0),
        Err(CombError::InvalidCapacity { node: 0, .. })
    ));
    assert!(matches!(
        t(vec![1.0], vec![3], 1.0),
        Err(CombError::UnknownNode { node: 3, .. })
    ));
}

#[test]
fn capacity_is_enforced_like_the_lp() {
    let mut p = triangle();
    p.classes[0].volume = 500.0;
    match min_max_load_flow(&p, Strategy::Ingress, true) {
        Err(CombError::Infeasible { families }) => {
            assert_eq!(families, vec![FAMILY_CAPACITY.to_string()])
        }
        other => panic!("{other:?}"),
    }
    let a = min_max_load_flow(&p, Strategy::Ingress, false).unwrap();
    assert!((a.max_load - 5.0).abs() < 1e-12);
}
