use super::*;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

/// Three nodes of capacity 100; class A on [0,2], B on [1,2], C on [2], 30 units each.
fn triangle() -> NetworkProblem {
    NetworkProblem {
        prov: vec![vec![100.0]; 3],
        footprints: vec![vec![1.0]],
        classes: vec![
            TrafficClass {
                path: vec![0, 2],
                volume: 30.0,
                hyperapp: 0,
            },
            TrafficClass {
                path: vec![1, 2],
                volume: 30.0,
                hyperapp: 0,
            },
            TrafficClass {
                path: vec![2],
                volume: 30.0,
                hyperapp: 0,
            },
        ],
        node_footprints: Vec::new(),
    }
}

/// A 5-node line with every ordered pair, three hyperapps and two resources, node 3
/// short of resource 1: enough structure that aggregation actually merges classes.
fn line_problem(resources: usize) -> NetworkProblem {
    let mut classes = Vec::new();
    for s in 0..5usize {
        for d in 0..5usize {
            if s == d {
                continue;
            }
            let path: Vec<NodeId> = if s < d {
                (s..=d).collect()
            } else {
                (d..=s).rev().collect()
            };
            for h in 0..3 {
                classes.push(TrafficClass {
                    path: path.clone(),
                    volume: (1 + (s * 7 + d * 3 + h) % 5) as f64,
                    hyperapp: h,
                });
            }
        }
    }
    let foot = |h: usize| (0..resources).map(|r| 1.0 + (h + 2 * r) as f64).collect();
    NetworkProblem {
        prov: (0..5)
            .map(|n| {
                (0..resources)
                    .map(|r| {
                        if n == 3 && r == 1 {
                            5.0
                        } else {
                            100.0 + n as f64
                        }
                    })
                    .collect()
            })
            .collect(),
        footprints: (0..3).map(foot).collect(),
        classes,
        node_footprints: Vec::new(),
    }
}

#[test]
fn aggregated_model_reaches_the_same_optimum() {
    for resources in [1, 2] {
        let p = line_problem(resources);
        for strategy in [Strategy::Path, Strategy::Edge] {
            let full = min_max_load_model(&p, strategy, false).unwrap();
            let agg = min_max_load_model_aggregated(&p, strategy, false).unwrap();
            assert!(agg.num_vars() < full.num_vars());
            let a = full.solve(&SolverOptions::default()).unwrap();
            let b = agg.solve(&SolverOptions::default()).unwrap();
            assert!(
                (a.max_load - b.max_load).abs() <= 1e-7 * a.max_load,
                "{resources} resources, {strategy:?}: {} vs {}",
                a.max_load,
                b.max_load
            );
            // The same as the one-call API, and a valid split for every class.
            let c = min_max_load(&p, strategy, false).unwrap();
            assert_eq!(c.max_load, a.max_load);
            for (class, fr) in p.classes.iter().zip(&b.fractions) {
                assert_eq!(
                    fr.iter().map(|x| x.0).collect::<Vec<_>>(),
                    strategy.eligible(&class.path)
                );
                assert!(close(fr.iter().map(|x| x.1).sum::<f64>(), 1.0));
            }
        }
    }
}

#[test]
fn solver_options_do_not_change_the_optimum() {
    use crate::lp::Method;
    let p = line_problem(1);
    let m = min_max_load_model(&p, Strategy::Path, false).unwrap();
    let base = m.solve(&SolverOptions::default()).unwrap().max_load;
    for method in [Method::DualSimplex, Method::PrimalSimplex, Method::Ipm] {
        for presolve in [true, false] {
            let o = SolverOptions {
                method,
                presolve,
                parallel: false,
                crossover: method != Method::Ipm || presolve,
            };
            let x = m.solve(&o).unwrap().max_load;
            assert!((x - base).abs() <= 1e-7 * base, "{o:?}: {x} vs {base}");
        }
    }
}

#[test]
fn eligible_nodes_keep_path_order_without_repeats() {
    assert_eq!(Strategy::Path.eligible(&[3, 1, 3, 2, 1]), vec![3, 1, 2]);
    assert_eq!(Strategy::Edge.eligible(&[4, 1, 4]), vec![4]);
    assert_eq!(Strategy::Ingress.eligible(&[2, 5]), vec![2]);
    // Long paths take the other dedup branch; same result.
    let long: Vec<NodeId> = (0..100).chain(0..50).chain(100..120).collect();
    assert_eq!(
        Strategy::Path.eligible(&long),
        (0..120).collect::<Vec<NodeId>>()
    );
}

#[test]
fn path_strategy_balances_load() {
    let a = min_max_load(&triangle(), Strategy::Path, true).unwrap();
    // 90 units over 3 nodes of 100 -> 0.3 everywhere.
    assert!(close(a.max_load, 0.3), "{}", a.max_load);
    for fr in &a.fractions {
        assert!(close(fr.iter().map(|x| x.1).sum::<f64>(), 1.0));
    }
    for row in &a.load {
        assert!(close(row[0], 0.3));
    }
}

#[test]
fn ingress_strategy_keeps_everything_at_the_ingress() {
    let a = min_max_load(&triangle(), Strategy::Ingress, true).unwrap();
    assert!(close(a.max_load, 0.3));
    assert_eq!(a.fractions[0], vec![(0, 1.0)]);
    // Make the ingress of class A hot: ingress-only cannot balance, edge can.
    let mut p = triangle();
    p.classes[0].volume = 90.0;
    p.classes[2].volume = 0.0;
    let ing = min_max_load(&p, Strategy::Ingress, true).unwrap();
    let edge = min_max_load(&p, Strategy::Edge, true).unwrap();
    assert!(close(ing.max_load, 0.9));
    // Edge: node 1 keeps all of B (0.3); A splits 45/45 over nodes 0 and 2.
    assert!(close(edge.max_load, 0.45), "{}", edge.max_load);
}

#[test]
fn capacity_infeasibility_is_named() {
    let mut p = triangle();
    p.classes[0].volume = 500.0;
    match min_max_load(&p, Strategy::Ingress, true) {
        Err(CombError::Infeasible { families }) => {
            assert!(
                families.iter().any(|f| f == FAMILY_CAPACITY),
                "{families:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    // Without the capacity rows the LP reports the overload instead.
    let a = min_max_load(&p, Strategy::Ingress, false).unwrap();
    assert!(close(a.max_load, 5.0));
}

#[test]
fn zero_capacity_nodes_take_nothing() {
    let mut p = triangle();
    p.prov[2] = vec![0.0];
    let c = p.classes.pop().unwrap();
    let a = min_max_load(&p, Strategy::Path, false).unwrap();
    for fr in &a.fractions {
        assert!(fr.iter().all(|&(n, d)| n != 2 || d == 0.0));
    }
    assert!(close(a.max_load, 0.3));
    // Class C only has node 2: no capacity anywhere on its path.
    p.classes.push(c);
    let err = min_max_load(&p, Strategy::Path, false).map(|a| a.max_load);
    // Coverage of class C cannot be met since d_{C,2} is fixed to 0.
    assert!(
        matches!(err, Err(CombError::Infeasible { ref families }) if families.iter().any(|f| f == FAMILY_COVERAGE)),
        "{err:?}"
    );
}

#[test]
fn bad_inputs_get_clear_errors() {
    let mut p = triangle();
    p.prov[1][0] = -1.0;
    assert_eq!(
        min_max_load(&p, Strategy::Path, true).unwrap_err(),
        CombError::InvalidCapacity {
            node: 1,
            resource: 0,
            value: -1.0
        }
    );
    let mut p = triangle();
    p.classes[1].path.clear();
    assert_eq!(
        min_max_load(&p, Strategy::Path, true).unwrap_err(),
        CombError::EmptyPath { class: 1 }
    );
    let mut p = triangle();
    p.classes[1].path = vec![1, 7];
    assert!(matches!(
        min_max_load(&p, Strategy::Path, true),
        Err(CombError::UnknownNode { node: 7, .. })
    ));
    let mut p = triangle();
    p.classes[0].volume = f64::NAN;
    assert!(matches!(
        min_max_load(&p, Strategy::Path, true),
        Err(CombError::InvalidVolume { class: 0, .. })
    ));
}

/// Two nodes with 10 CPU each; an IPS class (hyperapp 0) on [0, 1] and a monitor
/// class (hyperapp 1) on [1, 0], 10 units each, 1 CPU per unit. Resource 1 is an
/// accelerator, present (capacity 10) only when `accel` is set, at node 1, where
/// the IPS then needs 0.25 CPU and 0.5 accelerator per unit.
fn accel_problem(accel: bool) -> NetworkProblem {
    NetworkProblem {
        prov: vec![vec![10.0, 0.0], vec![10.0, if accel { 10.0 } else { 0.0 }]],
        footprints: vec![vec![1.0, 0.0], vec![1.0, 0.0]],
        classes: vec![
            TrafficClass {
                path: vec![0, 1],
                volume: 10.0,
                hyperapp: 0,
            },
            TrafficClass {
                path: vec![1, 0],
                volume: 10.0,
                hyperapp: 1,
            },
        ],
        node_footprints: if accel {
            vec![NodeFootprint {
                node: 1,
                hyperapp: 0,
                footprint: vec![0.25, 0.5],
            }]
        } else {
            Vec::new()
        },
    }
}

#[test]
fn accelerator_shifts_ips_load_and_lowers_the_max_load() {
    // Without the accelerator: 20 units of CPU work on 20 CPU, max load 1. With it,
    // all IPS work moves to node 1 (2.5 CPU + 5 accel) and the monitor splits so
    // that node 0 (10 - 10y) and node 1 (2.5 + 10y) balance: y = 3/8, load 5/8.
    for aggregate in [false, true] {
        let build = |p| {
            if aggregate {
                min_max_load_model_aggregated(p, Strategy::Path, true)
            } else {
                min_max_load_model(p, Strategy::Path, true)
            }
        };
        let plain = accel_problem(false);
        let a = build(&plain)
            .unwrap()
            .solve(&SolverOptions::default())
            .unwrap();
        assert!(close(a.max_load, 1.0), "{a:?}");
        let fast = accel_problem(true);
        let b = build(&fast)
            .unwrap()
            .solve(&SolverOptions::default())
            .unwrap();
        assert!(close(b.max_load, 0.625), "aggregate={aggregate}: {b:?}");
        assert_eq!(b.fractions[0][1].0, 1);
        assert!(close(b.fractions[0][1].1, 1.0), "{b:?}");
        assert!(close(b.fractions[1][0].1, 0.375), "{b:?}");
        // Loads are computed with the node's own footprint.
        assert!(
            close(b.load[1][0], 0.625) && close(b.load[1][1], 0.5),
            "{b:?}"
        );
        assert!(close(b.load[0][0], 0.625), "{b:?}");
    }
    // A node without accelerator capacity cannot take work that needs one.
    let mut p = accel_problem(true);
    p.node_footprints[0].node = 0;
    let c = min_max_load(&p, Strategy::Path, false).unwrap();
    assert!(
        close(c.fractions[0][0].1, 0.0) && close(c.max_load, 1.0),
        "{c:?}"
    );
}

#[test]
fn aggregation_keeps_node_dependent_footprints_apart() {
    // With one resource, hyperapps normally share splits; an override on one of
    // them must not leak to the others.
    let mut p = line_problem(1);
    p.node_footprints = vec![NodeFootprint {
        node: 2,
        hyperapp: 1,
        footprint: vec![0.1],
    }];
    let full = min_max_load_model(&p, Strategy::Path, false)
        .unwrap()
        .solve(&SolverOptions::default())
        .unwrap();
    let agg = min_max_load_model_aggregated(&p, Strategy::Path, false)
        .unwrap()
        .solve(&SolverOptions::default())
        .unwrap();
    assert!(
        (full.max_load - agg.max_load).abs() <= 1e-7 * full.max_load,
        "{} vs {}",
        full.max_load,
        agg.max_load
    );
    let plain = min_max_load(&line_problem(1), Strategy::Path, false).unwrap();
    assert!(agg.max_load < plain.max_load - 1e-6);
}

#[test]
fn bad_node_footprints_get_clear_errors() {
    let with = |o: NodeFootprint| {
        let mut p = accel_problem(true);
        p.node_footprints.push(o);
        min_max_load(&p, Strategy::Path, false).unwrap_err()
    };
    assert_eq!(
        with(NodeFootprint {
            node: 5,
            hyperapp: 0,
            footprint: vec![1.0, 0.0],
        }),
        CombError::NodeFootprintNode {
            index: 1,
            node: 5,
            nodes: 2
        }
    );
    assert_eq!(
        with(NodeFootprint {
            node: 0,
            hyperapp: 0,
            footprint: vec![-1.0, 0.0],
        }),
        CombError::InvalidNodeFootprint {
            node: 0,
            hyperapp: 0,
            expected: 2
        }
    );
    assert!(matches!(
        with(NodeFootprint {
            node: 0,
            hyperapp: 0,
            footprint: vec![1.0],
        }),
        CombError::InvalidNodeFootprint { .. }
    ));
    assert_eq!(
        with(NodeFootprint {
            node: 0,
            hyperapp: 9,
            footprint: vec![1.0, 0.0],
        }),
        CombError::NodeFootprintHyperapp {
            index: 1,
            hyperapp: 9
        }
    );
    assert_eq!(
        with(NodeFootprint {
            node: 1,
            hyperapp: 0,
            footprint: vec![1.0, 0.0],
        }),
        CombError::DuplicateNodeFootprint {
            node: 1,
            hyperapp: 0
        }
    );
    let msg = with(NodeFootprint {
        node: 5,
        hyperapp: 0,
        footprint: vec![1.0, 0.0],
    })
    .to_string();
    assert!(
        msg.contains("node 5") && msg.contains("out of range"),
        "{msg}"
    );
}

#[test]
fn provisioning_exploits_spatial_distribution_over_time() {
    // Paper Fig. 3 spirit: two paths sharing node 2, peaking at different epochs.
    let p = ProvisioningProblem {
        nodes: 3,
        footprints: vec![vec![1.0]],
        classes: vec![
            TrafficClass {
                path: vec![0, 2],
                volume: 0.0,
                hyperapp: 0,
            },
            TrafficClass {
                path: vec![1, 2],
                volume: 0.0,
                hyperapp: 0,
            },
        ],
        epochs: vec![vec![30.0, 0.0], vec![0.0, 30.0]],
    };
    let ingress = min_provisioning(&p, Strategy::Ingress).unwrap();
    assert!(close(ingress.cost, 60.0));
    let path = min_provisioning(&p, Strategy::Path).unwrap();
    // Each epoch's 30 units split over 0/2 (resp. 1/2): prov0 + prov2 >= 30 and
    // prov1 + prov2 >= 30; optimum is prov2 = 30, cost 30.
    assert!(close(path.cost, 30.0), "{}", path.cost);
}

/// `line_problem`'s classes over `epochs` pseudo-random epochs.
fn line_epochs(resources: usize, epochs: usize) -> ProvisioningProblem {
    let base = line_problem(resources);
    let mut x: u64 = 12345;
    let mut next = || {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    let epochs = (0..epochs)
        .map(|_| {
            base.classes
                .iter()
                .map(|c| c.volume * 3.0 * next() * next())
                .collect()
        })
        .collect();
    ProvisioningProblem {
        nodes: 5,
        footprints: base.footprints,
        classes: base.classes,
        epochs,
    }
}

#[test]
fn decomposed_provisioning_matches_the_monolithic_lp() {
    for resources in [1, 2] {
        let p = line_epochs(resources, 12);
        for s in [Strategy::Path, Strategy::Edge, Strategy::Ingress] {
            let a = min_provisioning(&p, s).unwrap();
            let b = min_provisioning_monolithic(&p, s).unwrap();
            assert!(
                (a.cost - b.cost).abs() <= 1e-6 * b.cost,
                "{resources} resources, {s:?}: {} vs {}",
                a.cost,
                b.cost
            );
            // The decomposed provisioning really serves every epoch.
            let g = EpochGroups::new(&p, s, None).unwrap();
            let flat: Vec<f64> = a.prov.iter().flatten().copied().collect();
            for e in 0..p.epochs.len() {
                let (lambda, _) = g.epoch_max_load(e, &flat).unwrap();
                assert!(lambda <= 1.0 + 1e-6, "{s:?} epoch {e}: {lambda}");
            }
        }
    }
    // Two-step, with per-hyperapp pinned parts.
    let p = line_epochs(1, 12);
    let pin: Vec<PinnedPart> = p
        .classes
        .iter()
        .map(|c| PinnedPart {
            fixed: vec![0.5 * (c.hyperapp + 1) as f64],
            at_ingress: vec![p.footprints[c.hyperapp][0] * 0.6],
        })
        .collect();
    for s in [Strategy::Path, Strategy::Edge, Strategy::Ingress] {
        let a = min_provisioning_two_step(&p, &pin, s).unwrap();
        let b = min_provisioning_two_step_monolithic(&p, &pin, s).unwrap();
        assert!(
            (a.cost - b.cost).abs() <= 1e-6 * b.cost,
            "two-step {s:?}: {} vs {}",
            a.cost,
            b.cost
        );
    }
}

#[test]
fn two_step_pins_work_at_the_ingress_and_discounts_reuse() {
    // One class on [0, 1], volume 10. Pinned part costs 1 at the ingress; the
    // distributable part costs 2 elsewhere but only 1 at the ingress (reuse).
    let p = ProvisioningProblem {
        nodes: 2,
        footprints: vec![vec![2.0]],
        classes: vec![TrafficClass {
            path: vec![0, 1],
            volume: 0.0,
            hyperapp: 0,
        }],
        epochs: vec![vec![10.0]],
    };
    let pin = vec![PinnedPart {
        fixed: vec![1.0],
        at_ingress: vec![1.0],
    }];
    let a = min_provisioning_two_step(&p, &pin, Strategy::Path).unwrap();
    // Cheapest: everything at the ingress, 10 + 10 = 20 (elsewhere would cost 10 + 20).
    assert!(close(a.cost, 20.0), "{a:?}");
    assert!(close(a.prov[0][0], 20.0));
    let bad = vec![PinnedPart {
        fixed: vec![-1.0],
        at_ingress: vec![1.0],
    }];
    assert!(matches!(
        min_provisioning_two_step(&p, &bad, Strategy::Path),
        Err(CombError::AppSpec(_))
    ));
    assert!(matches!(
        min_provisioning_two_step(&p, &[], Strategy::Path),
        Err(CombError::AppSpec(_))
    ));
}

#[test]
fn strawman_relaxation_lower_bounds_the_hyperapp_model() {
    // Appendix A flavour: two apps sharing a module, classes on overlapping paths.
    let apps = vec![
        Application {
            name: "a".into(),
            subscribes: vec!["x".into(), "y".into()],
            specific: vec![1.0],
            modules: vec!["s".into()],
        },
        Application {
            name: "b".into(),
            subscribes: vec!["x".into()],
            specific: vec![1.0],
            modules: vec!["s".into()],
        },
    ];
    let modules = vec![Module {
        name: "s".into(),
        footprint: vec![1.0],
    }];
    let order = vec![("a".to_string(), "b".to_string())];
    let prov = vec![vec![10.0]; 3];
    let kinds = vec![
        KindClass {
            path: vec![0, 1],
            volume: 6.0,
            kind: "x".into(),
        },
        KindClass {
            path: vec![1, 2],
            volume: 6.0,
            kind: "y".into(),
        },
        KindClass {
            path: vec![2],
            volume: 3.0,
            kind: "x".into(),
        },
    ];
    let straw = strawman_min_max_load(&prov, &apps, &modules, &order, &kinds).unwrap();
    let hs = derive_hyperapps(&apps, &modules, &order, 1).unwrap();
    let h_of = |k: &str| {
        hs.iter()
            .position(|h| h.kinds.iter().any(|x| x == k))
            .unwrap()
    };
    let problem = NetworkProblem {
        prov: prov.clone(),
        footprints: hs.iter().map(|h| h.footprint_reuse.clone()).collect(),
        classes: kinds
            .iter()
            .map(|k| TrafficClass {
                path: k.path.clone(),
                volume: k.volume,
                hyperapp: h_of(&k.kind),
            })
            .collect(),
        node_footprints: Vec::new(),
    };
    let hyper = min_max_load(&problem, Strategy::Path, false)
        .unwrap()
        .max_load;
    assert!(straw <= hyper + 1e-9, "{straw} > {hyper}");
    // Total work is at least 6*3 + 6*2 + 3*3 = 39 over 30 capacity.
    assert!(straw >= 39.0 / 30.0 - 1e-9, "{straw}");
    let mut bad = kinds.clone();
    bad[0].path.clear();
    assert_eq!(
        strawman_min_max_load(&prov, &apps, &modules, &order, &bad).unwrap_err(),
        CombError::EmptyPath { class: 0 }
    );
}

#[test]
fn random_instances_meet_coverage_and_strategy_order() {
    // A small LCG keeps the crate free of RNG dependencies.
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as f64 / (1u64 << 31) as f64
    };
    for _ in 0..20 {
        let nodes = 5;
        let prov: Vec<Vec<f64>> = (0..nodes)
            .map(|_| vec![50.0 + 100.0 * next(), 50.0 + 100.0 * next()])
            .collect();
        let footprints = vec![vec![1.0, 0.5], vec![0.2, 2.0]];
        let classes: Vec<TrafficClass> = (0..8)
            .map(|i| {
                let a = (next() * nodes as f64) as usize % nodes;
                let b = (a + 1 + (next() * 3.0) as usize) % nodes;
                let path = if a < b {
                    (a..=b).collect()
                } else {
                    (b..=a).rev().collect()
                };
                TrafficClass {
                    path,
                    volume: 10.0 + 40.0 * next(),
                    hyperapp: i % 2,
                }
            })
            .collect();
        let p = NetworkProblem {
            prov,
            footprints,
            classes,
            node_footprints: Vec::new(),
        };
        let mut prev = f64::INFINITY;
        for s in [Strategy::Ingress, Strategy::Edge, Strategy::Path] {
            let a = min_max_load(&p, s, false).unwrap();
            for (c, fr) in a.fractions.iter().enumerate() {
                assert!(close(fr.iter().map(|x| x.1).sum::<f64>(), 1.0), "class {c}");
                let allowed = s.eligible(&p.classes[c].path);
                assert!(fr.iter().all(|(n, _)| allowed.contains(n)));
            }
            assert!(a.load.iter().flatten().all(|&l| l <= a.max_load + 1e-7));
            // More freedom never hurts: Ingress >= Edge >= Path.
            assert!(a.max_load <= prev + 1e-7, "{s:?}: {} > {prev}", a.max_load);
            prev = a.max_load;
        }
    }
}

#[test]
fn hyperapps_follow_policy_order_and_reuse_modules() {
    let apps = vec![
        Application {
            name: "proxy".into(),
            subscribes: vec!["http".into()],
            specific: vec![1.0],
            modules: vec!["session".into(), "http".into()],
        },
        Application {
            name: "ids".into(),
            subscribes: vec!["http".into(), "udp".into()],
            specific: vec![2.0],
            modules: vec!["session".into()],
        },
        Application {
            name: "wanopt".into(),
            subscribes: vec!["nfs".into()],
            specific: vec![3.0],
            modules: vec!["session".into()],
        },
    ];
    let modules = vec![
        Module {
            name: "session".into(),
            footprint: vec![4.0],
        },
        Module {
            name: "http".into(),
            footprint: vec![0.5],
        },
    ];
    let order = vec![("ids".to_string(), "proxy".to_string())];
    let hs = derive_hyperapps(&apps, &modules, &order, 1).unwrap();
    assert_eq!(hs.len(), 3);
    let http = hs
        .iter()
        .find(|h| h.kinds.contains(&"http".to_string()))
        .unwrap();
    assert_eq!(http.apps, vec![1, 0], "ids must precede proxy");
    // Reuse counts the session module once: 1 + 2 + 4 + 0.5.
    assert!(close(http.footprint_reuse[0], 7.5));
    // Standalone: proxy (1 + 4 + 0.5) + ids (2 + 4).
    assert!(close(http.footprint_standalone[0], 11.5));
    let cyc = vec![
        ("ids".to_string(), "proxy".to_string()),
        ("proxy".to_string(), "ids".to_string()),
    ];
    assert!(matches!(
        derive_hyperapps(&apps, &modules, &cyc, 1),
        Err(CombError::AppSpec(_))
    ));
}

#[test]
fn per_box_lp_splits_a_heavy_hyperapp() {
    // Work 1.5 and 0.5 over two unit cores: optimum load 1.0 on both.
    let a = assign_cores(&[1.5, 0.5], &[1.0, 1.0], true).unwrap();
    assert!(close(a.max_load, 1.0));
    for row in &a.fractions {
        assert!(close(row.iter().sum::<f64>(), 1.0));
    }
    assert!(a.core_load.iter().all(|&l| close(l, 1.0)));
    match assign_cores(&[3.0], &[1.0, 1.0], true) {
        Err(CombError::Infeasible { families }) => {
            assert!(families.iter().any(|f| f == FAMILY_CAPACITY))
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        assign_cores(&[1.0], &[], true),
        Err(CombError::InvalidCore { .. })
    ));
    assert!(matches!(
        assign_cores(&[1.0], &[-2.0], true),
        Err(CombError::InvalidCore { core: 0, .. })
    ));
}
