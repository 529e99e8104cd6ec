//! Unit tests of the desired state: placement, counts, configurations.

use super::*;
use crate::error::ApiError;
use sluice_switch::Fib;

fn figure4() -> (String, TenantSpec) {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/tenant/figure4.yaml"
    ))
    .unwrap();
    let spec = TenantSpec::parse(&text, "figure4.yaml", Some(&sluice_builtin::registry())).unwrap();
    (text, spec)
}

fn vm(name: &str, host: u32, addr: &str, gateway: bool) -> VmRegistration {
    VmRegistration {
        tenant: "acme".into(),
        name: name.into(),
        host,
        iface: format!("v-{name}"),
        mac: "02:00:00:00:00:01".into(),
        addr: addr.parse().unwrap(),
        gateway,
    }
}

fn hosts(n: u32) -> Desired {
    let mut d = Desired::default();
    for h in 1..=n {
        d.hosts.insert(
            h,
            Host {
                id: h,
                name: format!("h{h}"),
                underlay: Ipv4Addr::new(10, 255, 0, h as u8),
                api: format!("http://127.0.0.1:{}", 7100 + h),
                capacity: None,
            },
        );
    }
    d
}

fn figure4_vms(d: &mut Desired) {
    d.register_vm(vm("gateway", 1, "198.51.100.10", true))
        .unwrap();
    d.register_vm(vm("web-a1", 2, "10.10.1.11", false)).unwrap();
    d.register_vm(vm("web-a2", 3, "10.10.1.12", false)).unwrap();
    d.register_vm(vm("web-b1", 1, "10.10.2.11", false)).unwrap();
    d.register_vm(vm("web-b2", 2, "10.10.2.12", false)).unwrap();
}

#[test]
fn instances_go_to_least_loaded_hosts_deterministically() {
    let (text, spec) = figure4();
    let mut d = hosts(3);
    figure4_vms(&mut d);
    assert!(d.apply_tenant(&text, spec.clone()).unwrap());
    let got: Vec<(String, u32, u32)> = d
        .instances
        .iter()
        .map(|(k, i)| (k.1.clone(), k.2, i.host))
        .collect();
    // fw x2, ips, lb-a, lb-b, mon in name order, round the hosts by load.
    assert_eq!(
        got,
        vec![
            ("fw".into(), 0, 1),
            ("fw".into(), 1, 2),
            ("ips".into(), 0, 3),
            ("lb-a".into(), 0, 1),
            ("lb-b".into(), 0, 2),
            ("mon".into(), 0, 3),
        ]
    );
    // Same spec again: nothing changes.
    let before = d.clone();
    assert!(!d.apply_tenant(&text, spec).unwrap());
    assert_eq!(d, before);
}

#[test]
fn a_services_weight_goes_to_its_vms_ports() {
    let (text, _) = figure4();
    let text = text.replace(
        "  web-b:\n    type: service\n",
        "  web-b:\n    type: service\n    weight: 4\n",
    );
    assert!(text.contains("weight: 4"), "figure4.yaml changed shape");
    let spec = TenantSpec::parse(&text, "f4w", Some(&sluice_builtin::registry())).unwrap();
    let mut d = hosts(3);
    figure4_vms(&mut d);
    d.apply_tenant(&text, spec).unwrap();
    let cfgs = d.configs("local").unwrap();
    let mut weights: Vec<(String, u16)> = cfgs
        .values()
        .flat_map(|c| c.ports.iter())
        .filter_map(|p| match &p.kind {
            PortKind::Vm { name, weight, .. } => Some((name.clone(), *weight)),
            PortKind::Instance { .. } => None,
        })
        .collect();
    weights.sort();
    assert_eq!(
        weights,
        vec![
            ("gateway".into(), 1),
            ("web-a1".into(), 1),
            ("web-a2".into(), 1),
            ("web-b1".into(), 4),
            ("web-b2".into(), 4),
        ]
    );
}

#[test]
fn a_changed_spec_keeps_existing_instances_in_place() {
    let (text, spec) = figure4();
    let mut d = hosts(3);
    figure4_vms(&mut d);
    d.apply_tenant(&text, spec).unwrap();
    let before = d.instances.clone();
    // Three firewalls, no monitor (and no mirror to it).
    let text2 = text
        .replace("instances: 2", "instances: 3")
        .replace("    mirror: [mon]\n", "")
        .replace("  mon: { type: middlebox, function: monitor }\n", "");
    let spec2 = TenantSpec::parse(&text2, "f4b", Some(&sluice_builtin::registry())).unwrap();
    assert!(d.apply_tenant(&text2, spec2).unwrap());
    let t = &d.tenants["acme"];
    assert_eq!((t.vni, t.generation), (1, 2));
    for (k, i) in &before {
        if k.1 == "mon" {
            assert!(!d.instances.contains_key(k));
        } else {
            assert_eq!(d.instances.get(k), Some(i), "{k:?} moved");
        }
    }
    let fw2 = d.instances[&("acme".into(), "fw".into(), 2)];
    // mon's host (3) was freed and is now the least loaded.
    assert_eq!(fw2.host, 3);
    d.configs("local").unwrap();
}

#[test]
fn port_ids_are_unique_per_host_and_not_reused_while_in_use() {
    let (text, spec) = figure4();
    let mut d = hosts(3);
    figure4_vms(&mut d);
    d.apply_tenant(&text, spec).unwrap();
    for h in 1..=3 {
        let mut ports: Vec<u16> = d
            .vms
            .values()
            .filter(|v| v.reg.host == h)
            .map(|v| v.port)
            .chain(d.instances.values().filter(|i| i.host == h).map(|i| i.port))
            .collect();
        let n = ports.len();
        ports.sort();
        ports.dedup();
        assert_eq!(ports.len(), n, "host {h} has duplicate ports");
        assert!(ports.iter().all(|&p| (1..=MAX_PORT).contains(&p)));
    }
    // Re-registering on the same host keeps the port; moving gets a free one.
    let p = d.vms[&("acme".into(), "web-a1".into())].port;
    assert_eq!(d.register_vm(vm("web-a1", 2, "10.10.1.11", false)), Ok(p));
    let moved = d.register_vm(vm("web-a1", 3, "10.10.1.11", false)).unwrap();
    assert!(!d.instances.values().any(|i| i.host == 3 && i.port == moved));
}

#[test]
fn configs_install_and_carry_every_instance() {
    let (text, spec) = figure4();
    let mut d = hosts(3);
    figure4_vms(&mut d);
    d.apply_tenant(&text, spec).unwrap();
    let mut cfgs = d.configs("redis://127.0.0.1:6379").unwrap();
    let changed = versioned(&BTreeMap::new(), &mut cfgs);
    assert_eq!(changed, vec![1, 2, 3]);
    let mut instances = 0;
    for (h, c) in &cfgs {
        assert_eq!(c.host, *h);
        assert_eq!(c.version, 1);
        assert_eq!(c.peers.len(), 3);
        assert_eq!(c.tenants.len(), 1);
        for t in &c.tenants {
            let mut f = Fib::new();
            f.replace(
                t.entries.clone(),
                t.groups
                    .iter()
                    .map(|(g, v)| (sluice_switch::GroupId(*g), v.clone()))
                    .collect(),
                c.version,
            )
            .unwrap();
        }
        for i in &c.instances {
            assert!(c.ports.iter().any(|p| p.id == i.port
                && p.kind
                    == PortKind::Instance {
                        name: i.name.clone()
                    }));
            assert_eq!(i.state, "redis://127.0.0.1:6379");
        }
        instances += c.instances.len();
    }
    assert_eq!(instances, 6);
    // Unchanged state: same versions.
    let mut again = d.configs("redis://127.0.0.1:6379").unwrap();
    assert!(versioned(&cfgs, &mut again).is_empty());
    assert_eq!(again, cfgs);
}

#[test]
fn chain_yaml_parses_for_every_function_of_figure4() {
    let (_, spec) = figure4();
    let reg = sluice_builtin::registry();
    let mut kinds = BTreeSet::new();
    for (name, e) in &spec.elements {
        if let Element::Middlebox {
            function, config, ..
        } = e
        {
            let y = chain_yaml("acme", name, function, config, None, (0, 1), &Value::Null);
            let cs = sluice_chain::ChainSpec::from_str(&y, std::path::Path::new("gen.yaml"))
                .unwrap_or_else(|e| panic!("{y}\n{e}"));
            assert_eq!(cs.name, format!("acme.{name}"));
            assert_eq!(cs.functions.len(), 1);
            assert_eq!(cs.functions[0].name, *name);
            assert_eq!(cs.functions[0].kind, *function);
            assert_eq!(cs.settings.batch_size, 32);
            assert_eq!(cs.settings.timer_interval_ms, 100);
            assert_eq!(cs.settings.pipeline, 0);
            let p = chain_yaml("acme", name, function, config, None, (256, 1), &Value::Null);
            let ps = sluice_chain::ChainSpec::from_str(&p, std::path::Path::new("gen.yaml"))
                .unwrap_or_else(|e| panic!("{p}\n{e}"));
            assert_eq!(ps.settings.pipeline, 256);
            assert_eq!(cs.settings.workers, 1);
            let w = chain_yaml("acme", name, function, config, None, (0, 4), &Value::Null);
            let ws = sluice_chain::ChainSpec::from_str(&w, std::path::Path::new("gen.yaml"))
                .unwrap_or_else(|e| panic!("{w}\n{e}"));
            assert_eq!(ws.settings.workers, 4);
            // A middlebox's `reassembly:` section is the chain's.
            let r: Value = yaml_serde::from_str("{udp_fragments: reassemble}").unwrap();
            let ry = chain_yaml("acme", name, function, config, None, (0, 1), &r);
            let rs = sluice_chain::ChainSpec::from_str(&ry, std::path::Path::new("gen.yaml"))
                .unwrap_or_else(|e| panic!("{ry}\n{e}"));
            assert_eq!(rs.reassembly, r);
            assert_eq!(cs.reassembly, Value::Null);
            sluice_chain::Chain::from_spec(
                &cs,
                std::path::Path::new("."),
                &reg,
                sluice_chain::Sharing::Shared,
            )
            .unwrap_or_else(|e| panic!("{y}\n{e}"));
            kinds.insert(function.clone());
        }
    }
    let want: BTreeSet<String> = ["firewall", "ips", "lb", "monitor"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(kinds, want);
}

#[test]
fn refusals_leave_reasons() {
    let (text, spec) = figure4();
    // No hosts: unplaceable.
    let mut d = Desired::default();
    figure4_vms(&mut d);
    assert!(matches!(
        d.apply_tenant(&text, spec.clone()),
        Err(PlaceError::NoHosts { .. })
    ));
    // A VM missing.
    let mut d = hosts(2);
    d.register_vm(vm("gateway", 1, "198.51.100.10", true))
        .unwrap();
    d.apply_tenant(&text, spec.clone()).unwrap();
    let e = d.configs("local").unwrap_err();
    assert!(e.to_string().contains("web-a1"), "{e}");
    // Wrong address.
    figure4_vms(&mut d);
    d.register_vm(vm("web-a1", 2, "10.10.1.99", false)).unwrap();
    let e = d.configs("local").unwrap_err();
    assert!(matches!(e, PlaceError::AddrMismatch { .. }), "{e}");
    // Second gateway.
    assert!(matches!(
        d.register_vm(vm("gw2", 1, "198.51.100.11", true)),
        Err(PlaceError::GatewayTaken { .. })
    ));
    // Another VM (here of another tenant) on a registered VM's interface.
    let mut other = vm("web-a1", 2, "10.10.1.11", false);
    other.tenant = "evil".into();
    let e = d.register_vm(other.clone()).unwrap_err();
    assert!(
        matches!(e, PlaceError::InterfaceTaken { host: 2, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("acme/web-a1"), "{e}");
    // The same interface name on another host is another interface; and a VM
    // re-registered on its own interface is fine.
    other.host = 3;
    d.register_vm(other).unwrap();
    d.register_vm(vm("web-a1", 2, "10.10.1.11", false)).unwrap();
}

#[test]
fn deleting_a_tenant_frees_its_instances_and_new_tenants_get_new_vnis() {
    let (text, spec) = figure4();
    let mut d = hosts(2);
    figure4_vms(&mut d);
    d.apply_tenant(&text, spec.clone()).unwrap();
    assert_eq!(d.tenants["acme"].vni, 1);
    assert!(d.remove_tenant("acme"));
    assert!(d.instances.is_empty());
    let cfgs = d.configs("local").unwrap();
    assert!(cfgs
        .values()
        .all(|c| c.ports.is_empty() && c.tenants.is_empty()));
    d.apply_tenant(&text, spec).unwrap();
    assert_eq!(d.tenants["acme"].vni, 2);
}

#[test]
fn a_tenant_without_externals_needs_no_gateway() {
    let text = "tenant: t\nelements:\n  a: { type: service, vms: { a1: 10.0.0.1 } }\n  b: { type: service, vms: { b1: 10.0.0.2 } }\n  m: { type: middlebox, function: monitor }\nchains:\n  - { name: ab, path: [a, m, b] }\n";
    let spec = TenantSpec::parse(text, "t.yaml", Some(&sluice_builtin::registry())).unwrap();
    let mut d = hosts(1);
    for (n, a) in [("a1", "10.0.0.1"), ("b1", "10.0.0.2")] {
        let mut r = vm(n, 1, a, false);
        r.tenant = "t".into();
        d.register_vm(r).unwrap();
    }
    d.apply_tenant(text, spec).unwrap();
    let c = d.compile_tenant("t").unwrap();
    assert_eq!(c.hosts.keys().copied().collect::<Vec<_>>(), vec![HostId(1)]);
    let cfgs = d.configs("local").unwrap();
    let t = &cfgs[&1].tenants[0];
    let mut f = Fib::new();
    f.replace(
        t.entries.clone(),
        t.groups
            .iter()
            .map(|(g, v)| (sluice_switch::GroupId(*g), v.clone()))
            .collect(),
        1,
    )
    .unwrap();
}

#[test]
fn scaled_counts_survive_the_same_spec_count_and_yield_to_a_new_one() {
    let (text, spec) = figure4();
    let mut d = hosts(3);
    figure4_vms(&mut d);
    d.apply_tenant(&text, spec).unwrap();
    d.scale("acme", "mon", 3).unwrap();
    assert_eq!(d.count("acme", "mon"), Some(3));
    let mons = |d: &Desired| d.instances.keys().filter(|k| k.1 == "mon").count();
    assert_eq!(mons(&d), 3);
    // Another change (fw's count), mon's spec count unchanged: kept.
    let text2 = text.replace("instances: 2", "instances: 3");
    let spec2 = TenantSpec::parse(&text2, "f4b", None).unwrap();
    d.apply_tenant(&text2, spec2).unwrap();
    assert_eq!((d.count("acme", "mon"), mons(&d)), (Some(3), 3));
    // mon's own count changed in the spec: the spec wins.
    let text3 = text2.replace(
        "mon: { type: middlebox, function: monitor }",
        "mon: { type: middlebox, function: monitor, instances: 2 }",
    );
    let spec3 = TenantSpec::parse(&text3, "f4c", None).unwrap();
    d.apply_tenant(&text3, spec3).unwrap();
    assert_eq!((d.count("acme", "mon"), mons(&d)), (Some(2), 2));
    assert!(d.scaled.is_empty());
    // Refusals.
    assert!(matches!(
        d.scale("acme", "web-a", 2),
        Err(PlaceError::UnknownMiddlebox { .. })
    ));
    assert!(matches!(
        d.scale("acme", "mon", 0),
        Err(PlaceError::BadCount(0))
    ));
    assert!(matches!(
        d.scale("nobody", "mon", 2),
        Err(PlaceError::UnknownTenant(_))
    ));
}

#[test]
fn local_state_instances_drain_and_down_ones_leave_groups() {
    let (text, _) = figure4();
    let text = text.replace(
        "mon: { type: middlebox, function: monitor }",
        "mon: { type: middlebox, function: monitor, state: local }",
    );
    let spec = TenantSpec::parse(&text, "f4", None).unwrap();
    let mut d = hosts(3);
    figure4_vms(&mut d);
    d.apply_tenant(&text, spec).unwrap();
    d.scale("acme", "mon", 2).unwrap();
    d.scale("acme", "mon", 1).unwrap();
    let k1 = ("acme".to_string(), "mon".to_string(), 1);
    assert!(d.draining.contains(&k1) && d.instances.contains_key(&k1));
    let i1 = d.instances[&k1];
    let p = d.placement("acme").unwrap();
    assert!(p
        .out_of_groups
        .contains(&(HostId(i1.host), PortId(i1.port))));
    let cfgs = d.configs("redis://x").unwrap();
    let own = &cfgs[&i1.host];
    assert!(own
        .instances
        .iter()
        .all(|i| (i.middlebox == "mon") == (i.state == "local")));
    // Scaling back up un-drains it.
    d.scale("acme", "mon", 2).unwrap();
    assert!(d.draining.is_empty());
    d.scale("acme", "mon", 1).unwrap();
    assert!(d.finish_drain(&k1));
    assert!(!d.instances.contains_key(&k1));
    // A down fw instance keeps its place but leaves the groups.
    let f1 = ("acme".to_string(), "fw".to_string(), 1);
    d.down.insert(f1.clone());
    let fi = d.instances[&f1];
    let p = d.placement("acme").unwrap();
    assert!(p
        .out_of_groups
        .contains(&(HostId(fi.host), PortId(fi.port))));
    let c = d.compile_tenant("acme").unwrap();
    let g = c.groups["fw"];
    for (h, hf) in &c.hosts {
        if let Some(grp) = hf.groups.get(&g) {
            let gone = if h.0 == fi.host {
                Output::Port(PortId(fi.port))
            } else {
                Output::Host(HostId(fi.host))
            };
            assert!(grp.ranges.iter().all(|r| r.1 != gone), "{grp:?}");
        }
    }
}

/// Fraction of the hash space `grp` gives to `o`.
fn share_of(grp: &sluice_switch::Group, o: Output) -> f64 {
    let mut lo = 0u64;
    let mut got = 0u64;
    for r in &grp.ranges {
        if r.1 == o {
            got += r.0 - lo;
        }
        lo = r.0;
    }
    got as f64 / (1u64 << 32) as f64
}

#[test]
fn a_new_pinned_instance_gets_most_new_flows_until_it_catches_up() {
    let (text, _) = figure4();
    let text = text.replace("function: ips\n", "function: ips\n    state: local\n");
    let spec = TenantSpec::parse(&text, "f4", None).unwrap();
    let mut d = hosts(3);
    figure4_vms(&mut d);
    d.apply_tenant(&text, spec).unwrap();
    assert!(d.pinned("acme", "ips"));
    assert!(
        d.catching_up.is_empty(),
        "first placement: nothing to catch up"
    );
    let ips_share = |d: &Desired, k: u32| {
        let c = d.compile_tenant("acme").unwrap();
        let g = c.groups["ips"];
        let i = d.instances[&("acme".to_string(), "ips".to_string(), k)];
        let (h, grp) = c
            .hosts
            .iter()
            .find_map(|(h, hf)| hf.groups.get(&g).map(|grp| (*h, grp.clone())))
            .expect("some host uses mon's group");
        let o = if h.0 == i.host {
            Output::Port(PortId(i.port))
        } else {
            Output::Host(HostId(i.host))
        };
        share_of(&grp, o)
    };
    d.scale("acme", "ips", 2).unwrap();
    let k1 = ("acme".to_string(), "ips".to_string(), 1);
    assert!(d.catching_up.contains(&k1));
    assert!((ips_share(&d, 1) - CATCH_UP_SHARE).abs() < 0.01);
    assert!((ips_share(&d, 0) - (1.0 - CATCH_UP_SHARE)).abs() < 0.01);
    assert!(d.end_catch_up(&k1) && !d.end_catch_up(&k1));
    assert!((ips_share(&d, 1) - 0.5).abs() < 0.01);
    // Two new ones at once share the preference; the old one keeps the rest.
    d.scale("acme", "ips", 4).unwrap();
    assert_eq!(d.catching_up.len(), 2);
    let p = d.placement("acme").unwrap();
    let hp = |k: u32| {
        let i = d.instances[&("acme".to_string(), "ips".to_string(), k)];
        (HostId(i.host), PortId(i.port))
    };
    assert_eq!(p.weights.get(&hp(2)), Some(&catch_up_weight(2, 2)));
    assert_eq!(p.weights.get(&hp(3)), Some(&catch_up_weight(2, 2)));
    assert!(!p.weights.contains_key(&hp(0)) && !p.weights.contains_key(&hp(1)));
    let w = f64::from(catch_up_weight(2, 2));
    let base = f64::from(BASE_WEIGHT);
    assert!((2.0 * w / (2.0 * w + 2.0 * base) - CATCH_UP_SHARE).abs() < 0.01);
    // Scaling in forgets catching-up instances that are gone or draining.
    d.scale("acme", "ips", 1).unwrap();
    for k in 1..4 {
        d.finish_drain(&("acme".to_string(), "ips".to_string(), k));
    }
    d.place_instances("acme").unwrap();
    assert!(d.catching_up.is_empty());
    // Middleboxes whose flows may move (shared state: hash) never catch up.
    d.scale("acme", "fw", 3).unwrap();
    assert!(d.catching_up.is_empty());
}

#[test]
fn catch_up_weights_give_the_new_instances_their_share() {
    assert_eq!(catch_up_weight(0, 1), BASE_WEIGHT);
    assert_eq!(catch_up_weight(3, 0), BASE_WEIGHT);
    // One old, one new: 3:1.
    assert_eq!(catch_up_weight(1, 1), 3 * BASE_WEIGHT);
    // Four old, one new: 12:4 of 16.
    let w = catch_up_weight(4, 1) as f64;
    assert!((w / (w + 4.0 * BASE_WEIGHT as f64) - CATCH_UP_SHARE).abs() < 0.01);
}

/// Figure 4 with `attrs` added to the firewall's element: each instance's
/// middlebox and generated chain settings.
fn instance_settings(attrs: &str) -> Vec<(String, sluice_chain::Settings)> {
    let (text, _) = figure4();
    let text = text.replace(
        "    function: firewall\n",
        &format!("    function: firewall\n{attrs}"),
    );
    let spec = TenantSpec::parse(&text, "f4", None).unwrap();
    let mut d = hosts(3);
    figure4_vms(&mut d);
    d.apply_tenant(&text, spec).unwrap();
    let cfgs = d.configs("redis://x").unwrap();
    cfgs.values()
        .flat_map(|c| &c.instances)
        .map(|i| {
            let cs = sluice_chain::ChainSpec::from_str(&i.chain_yaml, std::path::Path::new("g"))
                .unwrap();
            (i.middlebox.clone(), cs.settings)
        })
        .collect()
}

#[test]
fn a_pipelined_middlebox_runs_pipelined_instances() {
    let all = instance_settings("    state: cached\n    pipeline: 128\n");
    for (mb, s) in &all {
        assert_eq!(s.pipeline, if mb == "fw" { 128 } else { 0 }, "{mb}");
    }
    assert_eq!(all.iter().filter(|(mb, _)| mb == "fw").count(), 2);
    // Cached state pipelines unless told not to.
    for (attrs, want) in [
        ("    state: cached\n", sluice_tenant::DEFAULT_PIPELINE),
        ("    state: cached\n    pipeline: 0\n", 0),
    ] {
        let all = instance_settings(attrs);
        let fw: Vec<_> = all.iter().filter(|(mb, _)| mb == "fw").collect();
        assert_eq!(fw.len(), 2);
        assert!(fw.iter().all(|(_, s)| s.pipeline == want), "{attrs}");
    }
}

#[test]
fn a_middlebox_with_workers_runs_instances_with_that_many() {
    let all = instance_settings("    workers: 2\n");
    for (mb, s) in &all {
        assert_eq!(s.workers, if mb == "fw" { 2 } else { 1 }, "{mb}");
    }
    assert_eq!(all.iter().filter(|(mb, _)| mb == "fw").count(), 2);
}

#[test]
fn unpinned_local_state_moves_flows_at_once_and_capacity_reaches_the_instances() {
    let (text, _) = figure4();
    let text = text.replace(
        "mon: { type: middlebox, function: monitor }",
        "mon: { type: middlebox, function: monitor, state: local, affinity: hash, \
         capacity: { mbps: 40, burst_ms: 4 } }",
    );
    let spec = TenantSpec::parse(&text, "f4", None).unwrap();
    let mut d = hosts(3);
    figure4_vms(&mut d);
    d.apply_tenant(&text, spec).unwrap();
    assert!(d.local_state("acme", "mon") && !d.pinned("acme", "mon"));
    d.scale("acme", "mon", 2).unwrap();
    d.scale("acme", "mon", 1).unwrap();
    let k1 = ("acme".to_string(), "mon".to_string(), 1);
    assert!(
        !d.draining.contains(&k1) && !d.instances.contains_key(&k1),
        "an unpinned instance is removed without a drain"
    );
    let cfgs = d.configs("redis://x").unwrap();
    // (The firewall's group is listed too: it is `state: cached`; and the
    // IPS's, pinned by default as an IPS with shared state.)
    let all: Vec<_> = cfgs.values().flat_map(|c| &c.group_policies).collect();
    let pols: Vec<_> = all.iter().filter(|p| p.local_state).collect();
    assert!(
        pols.iter().all(|p| !p.pinned && p.draining.is_empty()),
        "unpinned local-state groups: {pols:?}"
    );
    assert!(
        all.iter().any(|p| !p.cached && !p.local_state && p.pinned),
        "the IPS's group is pinned: {all:?}"
    );
    let mon = cfgs
        .values()
        .flat_map(|c| &c.instances)
        .find(|i| i.middlebox == "mon")
        .unwrap();
    assert_eq!(mon.state, "local");
    let cs = sluice_chain::ChainSpec::from_str(&mon.chain_yaml, std::path::Path::new("g")).unwrap();
    let cap = cs
        .settings
        .capacity
        .expect("capacity in the instance's chain");
    assert_eq!((cap.mbps, cap.pps, cap.burst_ms), (Some(40.0), None, 4.0));
    // Shared state pinned on request (the on-path IPS): pinned groups, but no
    // drain.
    let text2 = text.replace(
        "    function: ips\n",
        "    function: ips\n    affinity: pinned\n",
    );
    let spec2 = TenantSpec::parse(&text2, "f4b", None).unwrap();
    d.apply_tenant(&text2, spec2).unwrap();
    d.scale("acme", "ips", 2).unwrap();
    assert!(d.pinned("acme", "ips") && !d.local_state("acme", "ips"));
    let cfgs = d.configs("redis://x").unwrap();
    let g = d.compile_tenant("acme").unwrap().groups["ips"];
    assert!(cfgs.values().any(|c| c
        .group_policies
        .iter()
        .any(|p| p.pinned && !p.local_state && p.group == g.0)));
    d.scale("acme", "ips", 1).unwrap();
    let i1 = ("acme".to_string(), "ips".to_string(), 1);
    assert!(
        !d.instances.contains_key(&i1),
        "shared state needs no drain"
    );
}

#[test]
fn tenants_accept_fabric_traffic_only_from_hosts_where_they_have_something() {
    let (text, spec) = figure4();
    let mut d = hosts(3);
    figure4_vms(&mut d);
    d.apply_tenant(&text, spec).unwrap();
    // A second tenant on hosts 1 and 2 only (its monitor's instance wherever
    // placement puts it).
    let t_text = "tenant: t\nelements:\n  a: { type: service, vms: { a1: 10.0.0.1 } }\n  b: { type: service, vms: { b1: 10.0.0.2 } }\n  m: { type: middlebox, function: monitor }\nchains:\n  - { name: ab, path: [a, m, b] }\n";
    let t_spec = TenantSpec::parse(t_text, "t.yaml", Some(&sluice_builtin::registry())).unwrap();
    for (n, a, h) in [("a1", "10.0.0.1", 1), ("b1", "10.0.0.2", 2)] {
        let mut r = vm(n, h, a, false);
        r.tenant = "t".into();
        d.register_vm(r).unwrap();
    }
    d.apply_tenant(t_text, t_spec).unwrap();
    let m_host = d
        .instances
        .iter()
        .find(|(k, _)| k.0 == "t")
        .map(|(_, i)| i.host)
        .unwrap();
    assert_ne!(m_host, 3, "the test needs a host with nothing of t");
    let cfgs = d.configs("local").unwrap();
    let senders = |h: u32, tenant: &str| {
        cfgs[&h]
            .tenants
            .iter()
            .find(|t| t.tenant == tenant)
            .map(|t| t.senders.clone())
    };
    // figure4 has something on every host: each accepts it from the others.
    assert_eq!(senders(1, "acme"), Some(Some(vec![2, 3])));
    assert_eq!(senders(2, "acme"), Some(Some(vec![1, 3])));
    assert_eq!(senders(3, "acme"), Some(Some(vec![1, 2])));
    // Tenant t is on hosts 1 and 2 only: host 3 may not send it, and gets no
    // FIB of it.
    assert_eq!(senders(1, "t"), Some(Some(vec![2])));
    assert_eq!(senders(2, "t"), Some(Some(vec![1])));
    assert_eq!(senders(3, "t"), None);
}

fn with_slots(d: &mut Desired, slots: &[u32]) {
    let ids: Vec<u32> = d.hosts.keys().copied().collect();
    for (id, s) in ids.into_iter().zip(slots) {
        if let Some(h) = d.hosts.get_mut(&id) {
            h.capacity = Some(HostCapacity {
                instance_slots: Some(*s),
                ..HostCapacity::default()
            });
        }
    }
}

fn mon_spec(text: &str, attrs: &str) -> (String, TenantSpec) {
    let t = text.replace(
        "mon: { type: middlebox, function: monitor }",
        &format!("mon: {{ type: middlebox, function: monitor, {attrs} }}"),
    );
    assert_ne!(t, text, "figure4.yaml changed shape");
    let spec = TenantSpec::parse(&t, "f4m", None).unwrap();
    (t, spec)
}

#[test]
fn declared_slots_bound_placement_and_a_scale_beyond_them_is_refused() {
    let (text, spec) = figure4();
    let mut d = hosts(3);
    with_slots(&mut d, &[2, 2, 2]);
    figure4_vms(&mut d);
    // Six instances, six slots.
    d.apply_tenant(&text, spec).unwrap();
    for h in 1..=3 {
        let n = d.instances.values().filter(|i| i.host == h).count();
        assert_eq!(n, 2, "host {h}");
    }
    let rooms = d.rooms("acme", "mon");
    assert!(rooms.iter().all(|r| r.free_slots() == Some(0)), "{rooms:?}");
    let mut next = d.clone();
    let e = next.scale("acme", "mon", 2).unwrap_err();
    let PlaceError::NoRoom(s) = &e else {
        panic!("{e}")
    };
    assert_eq!((s.wanted, s.placed), (1, 0));
    let m = e.to_string();
    for part in [
        "middlebox `mon` of tenant `acme` needs 1 new instance of 1 slot",
        "free: h1 0 slots; h2 0 slots; h3 0 slots",
        "anti-affinity: preferred",
    ] {
        assert!(m.contains(part), "{part:?} not in {m}");
    }
    assert_eq!(ApiError::from(e).status, 409);
    // Room on h3 (it re-registered with more slots): the scale fits there,
    // sharing a host with mon/0 only because no other host has room.
    with_slots(&mut d, &[2, 2, 4]);
    d.scale("acme", "mon", 3).unwrap();
    let on: Vec<u32> = (1..3)
        .map(|k| d.instances[&("acme".to_string(), "mon".to_string(), k)].host)
        .collect();
    assert_eq!(on, vec![3, 3]);
}

#[test]
fn required_anti_affinity_puts_each_instance_on_its_own_host_or_refuses() {
    let (text, _) = figure4();
    let (t, spec) = mon_spec(&text, "instances: 3, anti_affinity: required");
    let mut d = hosts(2);
    figure4_vms(&mut d);
    let before = d.clone();
    let mut next = d.clone();
    let e = next.apply_tenant(&t, spec.clone()).unwrap_err();
    let m = e.to_string();
    assert!(
        m.contains("`mon` of tenant `acme` needs 3 new instances of 1 slot, and only 2 fit"),
        "{m}"
    );
    assert!(m.contains("anti-affinity: required"), "{m}");
    assert_eq!(d, before);
    // Three hosts: one each. Preferred on two hosts: shared, not refused.
    let mut d = hosts(3);
    figure4_vms(&mut d);
    d.apply_tenant(&t, spec).unwrap();
    let mut mons: Vec<u32> = d
        .instances
        .iter()
        .filter(|(k, _)| k.1 == "mon")
        .map(|(_, i)| i.host)
        .collect();
    mons.sort();
    assert_eq!(mons, vec![1, 2, 3]);
    let (t, spec) = mon_spec(&text, "instances: 3");
    let mut d = hosts(2);
    figure4_vms(&mut d);
    d.apply_tenant(&t, spec).unwrap();
    assert_eq!(d.instances.keys().filter(|k| k.1 == "mon").count(), 3);
}

#[test]
fn a_middleboxs_resources_count_against_its_hosts() {
    let (text, _) = figure4();
    let (t, spec) = mon_spec(&text, "resources: { slots: 4 }");
    let mut d = hosts(2);
    with_slots(&mut d, &[4, 8]);
    figure4_vms(&mut d);
    d.apply_tenant(&t, spec).unwrap();
    let used: Vec<u32> = d.rooms("", "").iter().map(|r| r.used.slots).collect();
    // Best fit packs the five one-slot instances into h1 (fw/1 goes to h2:
    // soft anti-affinity), and mon's four slots fit only on h2.
    assert_eq!(used, vec![4, 5]);
    let mon = d.instances[&("acme".to_string(), "mon".to_string(), 0)];
    assert_eq!(mon.host, 2);
    // Nothing takes another slot anywhere now but h2's three.
    let (t, spec) = mon_spec(&text, "resources: { slots: 4 }, instances: 2");
    let e = d.clone().apply_tenant(&t, spec).unwrap_err();
    assert!(
        e.to_string()
            .contains("1 new instance of 4 slots, and only 0 fit; free: h1 0 slots; h2 3 slots"),
        "{e}"
    );
}

#[test]
fn a_host_peers_only_with_the_hosts_it_shares_a_tenant_with() {
    let (text, spec) = figure4();
    let mut d = hosts(5);
    figure4_vms(&mut d);
    let peers = |d: &Desired, h: u32| -> Vec<u32> {
        d.configs("local").unwrap()[&h]
            .peers
            .iter()
            .map(|p| p.host)
            .collect()
    };
    // VMs of a tenant not applied yet make nobody a peer.
    assert_eq!(peers(&d, 1), vec![1]);
    d.apply_tenant(&text, spec).unwrap();
    let used: BTreeSet<u32> = d
        .vms
        .values()
        .map(|v| v.reg.host)
        .chain(d.instances.values().map(|i| i.host))
        .collect();
    let cfgs = d.configs("local").unwrap();
    for (h, c) in &cfgs {
        let got: BTreeSet<u32> = c.peers.iter().map(|p| p.host).collect();
        if used.contains(h) {
            assert_eq!(got, used, "host {h}");
        } else {
            assert_eq!(got, BTreeSet::from([*h]), "host {h} has no tenant");
        }
    }
    // A new host with no tenant changes no other host's configuration.
    let mut before = cfgs;
    versioned(&BTreeMap::new(), &mut before);
    let mut more = d.clone();
    more.hosts.insert(
        6,
        Host {
            id: 6,
            name: "h6".into(),
            underlay: Ipv4Addr::new(10, 255, 0, 6),
            api: "http://127.0.0.1:7106".into(),
            capacity: None,
        },
    );
    let mut after = more.configs("local").unwrap();
    assert_eq!(versioned(&before, &mut after), vec![6]);
}

/// Each host's configuration says which inner sources every other host may
/// send the tenant's packets from: its VMs' addresses, for a host that runs
/// none of the tenant's instances and not its gateway (those forward others'
/// packets and are not listed).
#[test]
fn hosts_with_only_vms_may_send_only_from_their_vms() {
    let (text, spec) = figure4();
    let mut d = hosts(3);
    figure4_vms(&mut d);
    d.apply_tenant(&text, spec).unwrap();
    let listed = |d: &Desired, on: u32| -> Vec<(u32, Vec<String>)> {
        let cfgs = d.configs("local").unwrap();
        cfgs[&on].tenants[0]
            .sources
            .clone()
            .unwrap()
            .into_iter()
            .map(|s| (s.host, s.addrs.iter().map(|a| a.to_string()).collect()))
            .collect()
    };
    // Every host runs an instance: nobody is restricted.
    assert_eq!(listed(&d, 1), vec![]);
    // Host 3's instances leave it (contained): only web-a2 remains there.
    d.contain(3);
    assert_eq!(listed(&d, 2), vec![(3, vec!["10.10.1.12".to_string()])]);
    // Host 1 holds the gateway: never restricted, and never told about itself.
    for on in [2, 3] {
        assert!(listed(&d, on).iter().all(|(h, _)| *h != 1));
    }
    assert!(listed(&d, 1).iter().all(|(h, _)| *h != 1));
}

/// A tenant whose spec, placement and blocks did not change is not compiled
/// again (its compilation is the very same); any change to them compiles it
/// anew, and the configurations always equal those of a state that compiles
/// everything from scratch.
#[test]
fn unchanged_tenants_are_not_recompiled_and_results_match_a_fresh_compile() {
    let (text, spec) = figure4();
    let mut d = hosts(3);
    figure4_vms(&mut d);
    d.apply_tenant(&text, spec).unwrap();
    let fresh = |d: &Desired| {
        let mut f = d.clone();
        f.compiled = CompileCache::default();
        f
    };
    let first = d.compile_all().unwrap()["acme"].clone();
    let again = d.compile_all().unwrap()["acme"].clone();
    assert!(Arc::ptr_eq(&first, &again), "nothing changed: reused");
    // A clone (as the reconciler makes for each change) shares the cache.
    let next = d.clone();
    assert!(Arc::ptr_eq(&first, &next.compile_all().unwrap()["acme"]));
    assert_eq!(
        d.configs("local").unwrap(),
        fresh(&d).configs("local").unwrap()
    );

    // A scale step moves the placement: compiled anew, as from scratch.
    let mb = d.tenants["acme"]
        .spec
        .elements
        .iter()
        .find_map(|(n, e)| matches!(e, Element::Middlebox { .. }).then(|| n.clone()))
        .unwrap();
    let n = d.instances.keys().filter(|k| k.1 == mb).count() as u64;
    d.scale("acme", &mb, n + 1).unwrap();
    assert_eq!(
        d.instances.keys().filter(|k| k.1 == mb).count() as u64,
        n + 1
    );
    let scaled = d.compile_all().unwrap()["acme"].clone();
    assert!(!Arc::ptr_eq(&first, &scaled));
    assert_eq!(*scaled, *fresh(&d).compile_all().unwrap()["acme"]);
    assert_eq!(
        d.configs("local").unwrap(),
        fresh(&d).configs("local").unwrap()
    );

    // A block is an input too.
    let b = crate::blocks::Block {
        id: 1,
        tenant: "acme".into(),
        vm: "web-a1".into(),
        from: "192.0.2.0/24".into(),
        prefix: "192.0.2.0/24".into(),
        comment: None,
        created_at_ms: 0,
        created_by: "test".into(),
    };
    d.blocks.insert(1, b);
    let blocked = d.compile_all().unwrap()["acme"].clone();
    assert!(!Arc::ptr_eq(&scaled, &blocked));
    assert_eq!(*blocked, *fresh(&d).compile_all().unwrap()["acme"]);
}

/// A middlebox's `placement:` overrides the controller's policy for its new
/// instances (and is recorded as their policy); others keep the setting.
#[test]
fn a_middlebox_placement_overrides_the_controller_policy() {
    let (text, _) = figure4();
    let (text, spec) = mon_spec(&text, "instances: 2, placement: tenant-centric");
    let mut d = hosts(3);
    figure4_vms(&mut d);
    assert_eq!(d.policy, crate::placement::Policy::RackAware);
    d.apply_tenant(&text, spec).unwrap();
    for (k, why) in &d.why {
        let want = if k.1 == "mon" {
            crate::placement::Policy::TenantCentric
        } else {
            crate::placement::Policy::RackAware
        };
        assert_eq!(why.policy, want, "{k:?}: {}", why.reason);
    }
    assert_eq!(
        d.policy_for("acme", "mon"),
        crate::placement::Policy::TenantCentric
    );
}

/// The names a spec's `placement:` accepts are the controller's policies.
#[test]
fn spec_placement_names_are_the_controller_policies() {
    let names: Vec<&str> = crate::placement::Policy::ALL
        .iter()
        .map(|p| p.as_str())
        .collect();
    assert_eq!(names, sluice_tenant::PLACEMENT_POLICIES);
}

#[test]
fn a_partial_derivation_is_the_whole_ones_hosts_and_compiles_only_their_tenants() {
    let (text, spec) = figure4();
    // Figure 4's tenant on hosts 1-3; hosts 4-6 hold nothing yet.
    let mut d = hosts(6);
    figure4_vms(&mut d);
    d.apply_tenant(&text, spec).unwrap();
    let url = "redis://127.0.0.1:6379";
    let full = d.configs(url).unwrap();
    for only in [
        vec![1],
        vec![2, 5],
        vec![4, 5, 6],
        vec![1, 2, 3, 4, 5, 6, 99],
    ] {
        let only: BTreeSet<u32> = only.into_iter().collect();
        let part = d.configs_of(url, Some(&only)).unwrap();
        let want: BTreeMap<u32, AgentConfig> = full
            .iter()
            .filter(|(h, _)| only.contains(h))
            .map(|(h, c)| (*h, c.clone()))
            .collect();
        assert_eq!(part, want, "hosts {only:?}");
    }
    // Hosts holding no tenant compile none: a spec that no longer compiles
    // (its VM gone) fails the hosts that hold the tenant only.
    let more = hosts(8);
    for h in [7, 8] {
        d.hosts.insert(h, more.hosts[&h].clone());
    }
    d.vms.remove(&("acme".to_string(), "web-a1".to_string()));
    let empty: BTreeSet<u32> = [7, 8].into_iter().collect();
    assert_eq!(d.configs_of(url, Some(&empty)).unwrap().len(), 2);
    let theirs: BTreeSet<u32> = [3].into_iter().collect();
    assert!(d.configs_of(url, Some(&theirs)).is_err());
    assert!(d.configs(url).is_err());
}

/// Figure 4 with `fw` and `ips` consolidated into `edge` (west-to-b crosses
/// the IPS too, as a group's chains must cross all of it).
fn consolidated_figure4() -> (String, TenantSpec) {
    let (text, _) = figure4();
    let text = text.replace(
        "path: [clients-west, http, fw, lb-b, web-b]",
        "path: [clients-west, http, fw, ips, lb-b, web-b]",
    ) + "consolidate:\n  - { name: edge, members: [fw, ips] }\n";
    let spec = TenantSpec::parse(&text, "f4c", Some(&sluice_builtin::registry())).unwrap();
    (text, spec)
}

#[test]
fn a_consolidated_group_runs_as_one_pipeline_per_instance() {
    let (text, spec) = consolidated_figure4();
    let mut d = hosts(3);
    figure4_vms(&mut d);
    d.apply_tenant(&text, spec).unwrap();
    let mbs: BTreeSet<&str> = d.instances.keys().map(|k| k.1.as_str()).collect();
    assert_eq!(
        mbs,
        ["edge", "lb-a", "lb-b", "mon"].into_iter().collect(),
        "the members run no instances of their own"
    );
    let cfgs = d.configs("redis://x").unwrap();
    let edge: Vec<&InstanceConfig> = cfgs
        .values()
        .flat_map(|c| &c.instances)
        .filter(|i| i.middlebox == "edge")
        .collect();
    assert_eq!(edge.len(), 2, "the most a member asked for (fw's 2)");
    let reg = sluice_builtin::registry();
    for i in edge {
        assert!(i.name.starts_with("acme/edge/"), "{}", i.name);
        let cs = sluice_chain::ChainSpec::from_str(&i.chain_yaml, std::path::Path::new("g"))
            .unwrap_or_else(|e| panic!("{}\n{e}", i.chain_yaml));
        // One chain, so one state namespace per member across every instance.
        assert_eq!(cs.name, "acme.edge");
        let fs: Vec<(&str, &str)> = cs
            .functions
            .iter()
            .map(|f| (f.name.as_str(), f.kind.as_str()))
            .collect();
        assert_eq!(fs, [("fw", "firewall"), ("ips", "ips")]);
        assert!(cs.functions[0].config["rules"]
            .as_str()
            .is_some_and(|r| r.contains("deny tcp from 198.51.100.66")));
        // Requests come from the clients; replies cross in reverse.
        assert_eq!(
            cs.settings.forward_sources,
            ["198.51.100.0/24", "203.0.113.0/24"]
        );
        let chain = sluice_chain::Chain::from_spec(
            &cs,
            std::path::Path::new("."),
            &reg,
            sluice_chain::Sharing::Shared,
        )
        .unwrap();
        assert_eq!(chain.len(), 2);
    }
    // The switch steers every chain through the group as one hop.
    let c = d.compile_tenant("acme").unwrap();
    assert!(c.groups.contains_key("edge"));
    assert!(!c.groups.contains_key("fw") && !c.groups.contains_key("ips"));
}

/// The hosts' indexes kept with the VMs and instances, checked against a
/// recomputation from scratch: the index's own count, the tenants on each
/// host (what a scoped derivation compiles), each host's ports, and a
/// scoped derivation against the whole one.
fn indexes_right(d: &Desired, what: &str) {
    d.check_indexes();
    let whole = d.tenant_hosts();
    let full = d.configs("local");
    for h in 0..=8u32 {
        let only = BTreeSet::from([h]);
        let want: BTreeSet<&str> = whole
            .iter()
            .filter(|(_, hs)| hs.contains(&h))
            .map(|(t, _)| *t)
            .collect();
        assert_eq!(d.tenants_on(&only), want, "{what}: tenants on host {h}");
        let scan: BTreeSet<u16> = d
            .vms
            .values()
            .filter(|v| v.reg.host == h)
            .map(|v| v.port)
            .chain(d.instances.values().filter(|i| i.host == h).map(|i| i.port))
            .collect();
        assert_eq!(d.used_ports(h), scan, "{what}: ports of host {h}");
        if let Ok(full) = &full {
            let part = d.configs_of("local", Some(&only)).unwrap();
            assert_eq!(
                part.get(&h),
                full.get(&h),
                "{what}: host {h}'s configuration"
            );
        }
    }
}

#[test]
fn the_hosts_indexes_stay_right_through_applies_vms_deletions_and_hosts_emptied() {
    let (text, spec) = figure4();
    let beta_text = text.replacen("tenant: acme", "tenant: beta", 1);
    let beta =
        TenantSpec::parse(&beta_text, "beta.yaml", Some(&sluice_builtin::registry())).unwrap();
    let mut d = hosts(8);
    indexes_right(&d, "no VM");
    figure4_vms(&mut d);
    indexes_right(&d, "acme's VMs registered, not applied");
    d.apply_tenant(&text, spec).unwrap();
    indexes_right(&d, "acme applied");
    // The same VM names for beta, on hosts 4-6 (another tenant: no clash).
    for r in [
        vm("gateway", 4, "198.51.100.10", true),
        vm("web-a1", 5, "10.10.1.11", false),
        vm("web-a2", 6, "10.10.1.12", false),
        vm("web-b1", 4, "10.10.2.11", false),
        vm("web-b2", 5, "10.10.2.12", false),
    ] {
        d.register_vm(VmRegistration {
            tenant: "beta".into(),
            ..r
        })
        .unwrap();
    }
    d.apply_tenant(&beta_text, beta).unwrap();
    indexes_right(&d, "beta applied");
    // A VM moving host moves in the index (new port on the new host).
    d.register_vm(vm("web-a1", 7, "10.10.1.11", false)).unwrap();
    indexes_right(&d, "acme's web-a1 moved to host 7");
    assert!(d.vms.tenants_on(7).eq(["acme"]));
    // An interface of host 7 is taken, whoever asks; the index finds it.
    assert!(matches!(
        d.register_vm(VmRegistration {
            tenant: "beta".into(),
            iface: "v-web-a1".into(),
            ..vm("web-c1", 7, "10.10.3.11", false)
        }),
        Err(PlaceError::InterfaceTaken { host: 7, .. })
    ));
    indexes_right(&d, "interface refused");
    // Hosts emptied: acme's instances leave host 1 (silent) and host 2
    // (drained); every one is placed again elsewhere.
    let on = |d: &Desired, h: u32| d.instances.on_host(h).count();
    let before = (on(&d, 1), on(&d, 2));
    assert!(
        before.0 + before.1 > 0,
        "figure 4 has instances on hosts 1-2"
    );
    d.evacuate(1);
    indexes_right(&d, "host 1 evacuated");
    d.drain_host(2, true);
    indexes_right(&d, "host 2 drained");
    assert_eq!((on(&d, 1), on(&d, 2)), (0, 0));
    // A VM removed, then a tenant deleted (its VMs stay registered).
    d.vms.remove(&("beta".to_string(), "web-b2".to_string()));
    indexes_right(&d, "beta's web-b2 removed");
    assert!(d.remove_tenant("acme"));
    indexes_right(&d, "acme deleted");
    assert_eq!(d.tenant_instances("acme").count(), 0);
    assert!(d.why.keys().all(|k| k.0 != "acme"));
    assert!((0..=8).all(|h| d.instances.tenants_on(h).all(|t| t != "acme")));
    // Its VMs still count for their hosts' ports, not for its tenants.
    assert!(d.vms.tenants_on(7).eq(["acme"]));
    assert!(!d.tenants_on(&BTreeSet::from([7])).contains("acme"));
}
