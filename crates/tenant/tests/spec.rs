//! Tenant specs: the Figure 4 example validates; every kind of mistake is refused
//! with the field named.

use sluice_tenant::{Affinity, AntiAffinity, Element, Resources, StateMode, TenantSpec};

fn parse(text: &str) -> Result<TenantSpec, String> {
    TenantSpec::parse(text, "t.yaml", Some(&sluice_builtin::registry())).map_err(|e| e.to_string())
}

const BASE: &str = r#"
tenant: t
elements:
  net: { type: external, subnets: [198.51.100.0/24] }
  net2: { type: external, subnets: [198.51.100.128/25] }
  web: { type: service, vms: { w1: 10.0.0.1 } }
  http: { type: select, proto: tcp, dport: 80 }
  https: { type: select, proto: tcp, dport: 443 }
  web-ports: { type: select, proto: tcp, dport: "1-1000" }
  fw: { type: middlebox, function: firewall, config: { rules: "default allow" } }
  mon: { type: middlebox, function: monitor }
chains:
"#;

fn with_chains(chains: &str) -> String {
    format!("{BASE}{chains}")
}

#[test]
fn figure4_example_validates() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/tenant/figure4.yaml"
    ))
    .unwrap();
    let s = parse(&text).unwrap();
    assert_eq!(s.chains.len(), 3);
    let fw_users = s
        .chains
        .iter()
        .filter(|c| c.path.iter().any(|n| n == "fw"))
        .count();
    assert_eq!(fw_users, 3, "the firewall is shared by every chain");
    assert!(matches!(
        s.elements["fw"],
        Element::Middlebox { instances: 2, .. }
    ));
    assert_eq!(s.chains[0].mirror, vec!["mon".to_string()]);
    assert!(
        s.chains.iter().all(|c| c.bidirectional),
        "chains are bidirectional by default"
    );
    let mb: Vec<&str> = s.chains[2].middleboxes(&s).collect();
    assert_eq!(mb, vec!["fw", "lb-b"]);
}

#[test]
fn disjoint_selects_between_the_same_endpoints_are_fine() {
    parse(&with_chains(
        "  - { name: a, path: [net, http, fw, web] }\n  - { name: b, path: [net, https, mon, web] }\n",
    ))
    .unwrap();
}

#[test]
fn each_mistake_names_its_field() {
    let cases: &[(&str, &str)] = &[
        ("  - { name: a, path: [net, fw, nowhere] }\n", "chains[0].path[2]: unknown element `nowhere`"),
        ("  - { name: a, path: [net, fw, fw, web] }\n", "chains[0].path[2]: cycle: `fw` already appears at path[1]"),
        ("  - { name: a, path: [fw, web] }\n", "chains[0].path[0]: `fw` is a middlebox"),
        ("  - { name: a, path: [net, web, fw, web] }\n", "chains[0].path[1]: `web` is a service"),
        ("  - { name: a, path: [net, fw, web], mirror: [http] }\n", "chains[0].mirror[0]: `http` is a select"),
        ("  - { name: a, path: [net, fw, web], colour: red }\n", "chains[0].colour: unknown key"),
        (
            "  - { name: a, path: [net, http, fw, web] }\n  - { name: b, path: [net, web-ports, mon, web] }\n",
            "chains[1]: chain `b` claims traffic that chain `a`",
        ),
        (
            "  - { name: a, path: [net, fw, web] }\n  - { name: b, path: [net2, mon, web] }\n",
            "chains[1]: chain `b` claims traffic",
        ),
        (
            "  - { name: a, path: [net, fw, web] }\n  - { name: b, path: [web, mon, net] }\n",
            "chains[1]: chain `b` claims traffic",
        ),
        (
            "  - { name: a, path: [net, fw, web] }\n  - { name: a, path: [net, https, fw, web] }\n",
            "chains[1].name: chain `a` is defined twice",
        ),
    ];
    for (chains, want) in cases {
        let e = parse(&with_chains(chains)).unwrap_err();
        assert!(e.contains(want), "expected `{want}` in `{e}`");
        assert!(e.starts_with("t.yaml: "), "{e}");
    }
}

#[test]
fn bad_elements_are_refused() {
    let cases: &[(&str, &str)] = &[
        (
            "x: { type: router }",
            "elements.x.type: unknown element type `router`",
        ),
        ("x: { type: middlebox }", "elements.x.function: missing"),
        (
            "x: { type: middlebox, function: firewall }",
            "elements.x.config: missing: a firewall needs its configuration",
        ),
        (
            "x: { type: middlebox, function: nat, config: { inside: [10.0.0.0/8] } }",
            "elements.x.config:",
        ),
        (
            "x: { type: middlebox, function: teleporter, config: {} }",
            "unknown function type `teleporter`",
        ),
        (
            "x: { type: middlebox, function: monitor, instances: 0 }",
            "elements.x.instances",
        ),
        (
            "x: { type: middlebox, function: monitor, state: remote }",
            "elements.x.state: expected `shared`",
        ),
        (
            "x: { type: external, subnets: [] }",
            "elements.x.subnets: an external element needs at least one subnet",
        ),
        (
            "x: { type: external, subnets: [10.0.0.0/33] }",
            "elements.x.subnets[0]",
        ),
        (
            "x: { type: service, vms: { v: not-an-ip } }",
            "elements.x.vms.v: expected an IP address",
        ),
        (
            "x: { type: select }",
            "elements.x: a select needs at least one of",
        ),
        ("x: { type: select, dport: \"90-80\" }", "elements.x.dport"),
        (
            "x: { type: select, proto: sctpx }",
            "elements.x.proto: unknown protocol `sctpx`",
        ),
    ];
    for (el, want) in cases {
        let text = format!("tenant: t\nelements:\n  {el}\nchains: []\n");
        let e = parse(&text).unwrap_err();
        assert!(e.contains(want), "expected `{want}` in `{e}`");
    }
    assert!(parse("tenant: t\nelements: {}\nchains: [\n")
        .unwrap_err()
        .contains("(document)"));
    assert!(parse("elements: {}\nchains: []\n")
        .unwrap_err()
        .contains("tenant: missing"));
}

#[test]
fn middlebox_state_is_shared_unless_local() {
    let text = BASE.replace(
        "mon: { type: middlebox, function: monitor }",
        "mon: { type: middlebox, function: monitor, state: local }",
    ) + "  - { name: a, path: [net, fw, mon, web] }\n";
    let s = parse(&text).unwrap();
    assert!(matches!(
        s.elements["mon"],
        Element::Middlebox {
            state: StateMode::Local,
            ..
        }
    ));
    assert!(matches!(
        s.elements["fw"],
        Element::Middlebox {
            state: StateMode::Shared,
            ..
        }
    ));
}

#[test]
fn workers_are_bounded_and_need_stored_state_for_rewriting_functions() {
    let with = |function: &str, attrs: &str| {
        BASE.replace(
            "mon: { type: middlebox, function: monitor }",
            &format!("mon: {{ type: middlebox, function: {function}, {attrs} }}"),
        ) + "  - { name: a, path: [net, fw, mon, web] }\n"
    };
    let s = parse(&with("monitor", "workers: 4")).unwrap();
    assert!(matches!(
        s.elements["mon"],
        Element::Middlebox { workers: 4, .. }
    ));
    let s = parse(&with("monitor", "state: local")).unwrap();
    assert!(matches!(
        s.elements["mon"],
        Element::Middlebox { workers: 1, .. }
    ));
    for bad in ["0", "65", "two"] {
        let e = parse(&with("monitor", &format!("workers: {bad}"))).unwrap_err();
        assert!(
            e.contains("elements.mon.workers") && e.contains("64"),
            "{bad}: {e}"
        );
    }
    // A local-state monitor may have workers: each flow stays on one.
    assert!(parse(&with("monitor", "state: local, workers: 2")).is_ok());
    let nat = "config: { inside: [10.0.0.0/8], pool: [203.0.113.1] }, ";
    let e = parse(&with("nat", &format!("{nat}state: local, workers: 2"))).unwrap_err();
    assert!(
        e.contains("elements.mon.workers") && e.contains("state: shared"),
        "{e}"
    );
    let ok = parse(&with("nat", &format!("{nat}workers: 2")));
    assert!(ok.is_ok(), "{ok:?}");
}

#[test]
fn pipeline_is_for_cached_state_and_bounded() {
    let with = |attrs: &str| {
        BASE.replace(
            "mon: { type: middlebox, function: monitor }",
            &format!("mon: {{ type: middlebox, function: monitor, {attrs} }}"),
        ) + "  - { name: a, path: [net, fw, mon, web] }\n"
    };
    let s = parse(&with("state: cached, pipeline: 256")).unwrap();
    assert!(matches!(
        s.elements["mon"],
        Element::Middlebox { pipeline: 256, .. }
    ));
    // Cached state pipelines by default; `pipeline: 0` turns it off, and
    // the other state modes have nothing to pipeline.
    let s = parse(&with("state: cached")).unwrap();
    assert!(matches!(
        s.elements["mon"],
        Element::Middlebox {
            pipeline: sluice_tenant::DEFAULT_PIPELINE,
            ..
        }
    ));
    let s = parse(&with("state: cached, pipeline: 0")).unwrap();
    assert!(matches!(
        s.elements["mon"],
        Element::Middlebox { pipeline: 0, .. }
    ));
    for state in ["shared", "local"] {
        let s = parse(&with(&format!("state: {state}"))).unwrap();
        assert!(
            matches!(s.elements["mon"], Element::Middlebox { pipeline: 0, .. }),
            "{state}"
        );
    }
    let e = parse(&with("pipeline: 256")).unwrap_err();
    assert!(
        e.contains("elements.mon.pipeline") && e.contains("state: cached"),
        "{e}"
    );
    for bad in ["-1", "70000", "many"] {
        let e = parse(&with(&format!("state: cached, pipeline: {bad}"))).unwrap_err();
        assert!(
            e.contains("elements.mon.pipeline") && e.contains("65536"),
            "{bad}: {e}"
        );
    }
}

#[test]
fn cached_state_is_parsed_and_refuses_pinned_affinity() {
    let text = BASE.replace(
        "mon: { type: middlebox, function: monitor }",
        "mon: { type: middlebox, function: monitor, state: cached }",
    ) + "  - { name: a, path: [net, fw, mon, web] }\n";
    let s = parse(&text).unwrap();
    assert!(matches!(
        s.elements["mon"],
        Element::Middlebox {
            state: StateMode::Cached,
            affinity: Affinity::Hash,
            ..
        }
    ));
    let e = parse(&text.replace("state: cached", "state: cached, affinity: pinned")).unwrap_err();
    assert!(
        e.contains("elements.mon.affinity") && e.contains("state: cached"),
        "{e}"
    );
    let e = parse(&text.replace("state: cached", "state: cache")).unwrap_err();
    assert!(
        e.contains("elements.mon.state") && e.contains("`cached`"),
        "{e}"
    );
}

#[test]
fn affinity_defaults_follow_the_state_mode_and_can_be_set() {
    let text = BASE.replace(
        "mon: { type: middlebox, function: monitor }",
        "mon: { type: middlebox, function: monitor, state: local }\n  \
             mon2: { type: middlebox, function: monitor, state: local, affinity: hash }\n  \
             mon3: { type: middlebox, function: monitor, affinity: pinned }",
    ) + "  - { name: a, path: [net, fw, mon, mon2, mon3, web] }\n";
    let s = parse(&text).unwrap();
    let aff = |n: &str| match &s.elements[n] {
        Element::Middlebox { affinity, .. } => *affinity,
        _ => panic!("{n} is not a middlebox"),
    };
    assert_eq!(aff("fw"), Affinity::Hash, "shared state: hash by default");
    assert_eq!(
        aff("mon"),
        Affinity::Pinned,
        "local state: pinned by default"
    );
    assert_eq!(aff("mon2"), Affinity::Hash);
    assert_eq!(aff("mon3"), Affinity::Pinned);
    let e = parse(&text.replace("affinity: hash", "affinity: sticky")).unwrap_err();
    assert!(e.contains("elements.mon2.affinity"), "{e}");
}

#[test]
fn an_ips_with_shared_state_is_pinned_unless_told_otherwise() {
    // Its stream records must not have two live writers (a rejoin or a new
    // split would move flows whose packets the old instance still holds).
    let text = BASE.replace(
        "mon: { type: middlebox, function: monitor }",
        "mon: { type: middlebox, function: monitor }\n  \
             ips: { type: middlebox, function: ips, config: { rules: [] } }\n  \
             ips2: { type: middlebox, function: ips, config: { rules: [] }, affinity: hash }\n  \
             ips3: { type: middlebox, function: ips, config: { rules: [] }, state: cached }",
    ) + "  - { name: a, path: [net, fw, mon, ips, ips2, ips3, web] }\n";
    let s = parse(&text).unwrap();
    let aff = |n: &str| match &s.elements[n] {
        Element::Middlebox { affinity, .. } => *affinity,
        _ => panic!("{n} is not a middlebox"),
    };
    assert_eq!(aff("ips"), Affinity::Pinned, "shared state: pinned");
    assert_eq!(aff("ips2"), Affinity::Hash, "the tenant's choice stands");
    assert_eq!(aff("ips3"), Affinity::Hash, "cached: its lease hands over");
    assert_eq!(aff("fw"), Affinity::Hash);
    assert_eq!(aff("mon"), Affinity::Hash);
}

#[test]
fn capacity_is_parsed_and_bad_budgets_are_refused_by_name() {
    let with = |cap: &str| {
        BASE.replace(
            "mon: { type: middlebox, function: monitor }",
            &format!("mon: {{ type: middlebox, function: monitor, capacity: {cap} }}"),
        ) + "  - { name: a, path: [net, fw, mon, web] }\n"
    };
    let s = parse(&with("{ mbps: 50, burst_ms: 5 }")).unwrap();
    match &s.elements["mon"] {
        Element::Middlebox {
            capacity: Some(c), ..
        } => {
            assert_eq!((c.mbps, c.pps, c.burst_ms), (Some(50.0), None, 5.0));
        }
        other => panic!("no capacity: {other:?}"),
    }
    for (cap, want) in [
        ("{ burst_ms: 5 }", "give mbps, pps or both"),
        ("{ mbps: -1 }", "positive"),
        ("{ pps: 0 }", "positive"),
        ("{ mbps: 10, speed: 3 }", "speed"),
        ("fast", "expected {mbps, pps, burst_ms}"),
    ] {
        let e = parse(&with(cap)).unwrap_err();
        assert!(
            e.contains("elements.mon.capacity") && e.contains(want),
            "{cap}: {e}"
        );
    }
}

#[test]
fn a_service_weight_reaches_its_vms_and_bad_ones_are_refused_by_name() {
    let with = |attrs: &str| {
        BASE.replace(
            "web: { type: service, vms: { w1: 10.0.0.1 } }",
            &format!("web: {{ type: service, vms: {{ w1: 10.0.0.1, w2: 10.0.0.2 }}{attrs} }}"),
        ) + "  - { name: a, path: [net, fw, web] }\n"
    };
    let weights = |s: &TenantSpec| match &s.elements["web"] {
        Element::Service { vms } => vms.iter().map(|v| v.weight).collect::<Vec<_>>(),
        _ => panic!("not a service"),
    };
    assert_eq!(weights(&parse(&with("")).unwrap()), vec![1, 1]);
    assert_eq!(weights(&parse(&with(", weight: 3")).unwrap()), vec![3, 3]);
    for bad in ["0", "1001", "-2", "heavy", "1.5"] {
        let e = parse(&with(&format!(", weight: {bad}"))).unwrap_err();
        assert!(
            e.contains("elements.web.weight") && e.contains("1 to 1000"),
            "{bad}: {e}"
        );
    }
}

fn example(rel: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/../../examples/{rel}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// Both formats are in the examples: figure4 flat, the failover and scaling
/// experiments `sluice.dev/v1`. Each parses, and the same spec in the other
/// format parses to the same thing (but the labels, which only v1 holds).
#[test]
fn every_example_parses_in_either_format() {
    use sluice_tenant::format::{convert, format_of, Format};
    let cases = [
        ("tenant/figure4.yaml", Format::Flat),
        ("experiments/failover.yaml", Format::V1),
        ("experiments/failover-local.yaml", Format::Flat),
        ("experiments/scaling.yaml", Format::V1),
        ("experiments/elasticity.yaml", Format::Flat),
    ];
    for (rel, shape) in cases {
        let text = example(rel);
        let doc: yaml_serde::Value = yaml_serde::from_str(&text).unwrap();
        assert_eq!(format_of(&doc), shape, "{rel}");
        let spec = parse(&text).unwrap_or_else(|e| panic!("{rel}: {e}"));
        let other = match shape {
            Format::Flat => Format::V1,
            Format::V1 => Format::Flat,
        };
        let converted = yaml_serde::to_string(&convert(&doc, other, rel).unwrap()).unwrap();
        let mut again = parse(&converted).unwrap_or_else(|e| panic!("{rel} converted: {e}"));
        if shape == Format::V1 {
            assert_eq!(
                spec.labels.get("experiment").map(|s| !s.is_empty()),
                Some(true),
                "{rel}"
            );
            again.labels = spec.labels.clone();
        }
        assert_eq!(again, spec, "{rel}: the two formats differ");
    }
}

#[test]
fn a_spec_of_an_unknown_version_or_kind_is_refused_naming_it() {
    let v1 = |version: &str, kind: &str| {
        format!(
            "apiVersion: {version}\nkind: {kind}\nmetadata: {{ name: t }}\nspec: {{ elements: {{}}, chains: [] }}\n"
        )
    };
    assert_eq!(parse(&v1("sluice.dev/v1", "Tenant")).unwrap().tenant, "t");
    let e = parse(&v1("sluice.dev/v1beta9", "Tenant")).unwrap_err();
    assert!(
        e.contains("`sluice.dev/v1beta9` is not supported (supported: sluice.dev/v1)"),
        "{e}"
    );
    let e = parse(&v1("sluice.dev/v1", "Host")).unwrap_err();
    assert!(
        e.contains("kind: `Host` is not supported (supported: Tenant)"),
        "{e}"
    );
    // The first format with a stray v1 key: the version is asked for.
    let e = parse("tenant: t\nspec: {}\nelements: {}\nchains: []\n").unwrap_err();
    assert!(e.contains("apiVersion: missing"), "{e}");
}

#[test]
fn resources_and_anti_affinity_default_and_are_checked() {
    let with = |attrs: &str| {
        BASE.replace(
            "mon: { type: middlebox, function: monitor }",
            &format!("mon: {{ type: middlebox, function: monitor{attrs} }}"),
        ) + "  - { name: a, path: [net, fw, mon, web] }\n"
    };
    let s = parse(&with("")).unwrap();
    match &s.elements["mon"] {
        Element::Middlebox {
            resources,
            anti_affinity,
            ..
        } => {
            assert_eq!(*resources, Resources::default());
            assert_eq!(resources.slots, 1, "an instance takes one slot");
            assert_eq!(*anti_affinity, AntiAffinity::Preferred);
        }
        e => panic!("{e:?}"),
    }
    let s = parse(&with(
        ", resources: { slots: 2, memory_mib: 512 }, anti_affinity: required",
    ))
    .unwrap();
    match &s.elements["mon"] {
        Element::Middlebox {
            resources,
            anti_affinity,
            ..
        } => {
            assert_eq!(
                *resources,
                Resources {
                    slots: 2,
                    cores: 0,
                    memory_mib: 512
                }
            );
            assert_eq!(*anti_affinity, AntiAffinity::Required);
        }
        e => panic!("{e:?}"),
    }
    for (bad, field, says) in [
        (
            ", resources: { slots: 0 }",
            "elements.mon.resources",
            "slots",
        ),
        (
            ", resources: { disks: 1 }",
            "elements.mon.resources",
            "disks",
        ),
        (", resources: 3", "elements.mon.resources", "slots, cores"),
        (
            ", anti_affinity: always",
            "elements.mon.anti_affinity",
            "`required`",
        ),
        (
            ", placement: nearest",
            "elements.mon.placement",
            "least-loaded, rack-aware, tenant-centric, service-centric",
        ),
    ] {
        let e = parse(&with(bad)).unwrap_err();
        assert!(e.contains(field) && e.contains(says), "{bad}: {e}");
    }
    // `placement:` is optional and kept as written.
    let placement = |s: &sluice_tenant::TenantSpec| match &s.elements["mon"] {
        Element::Middlebox { placement, .. } => placement.clone(),
        e => panic!("{e:?}"),
    };
    assert_eq!(placement(&parse(&with("")).unwrap()), None);
    assert_eq!(
        placement(&parse(&with(", placement: service-centric")).unwrap()).as_deref(),
        Some("service-centric")
    );
}

#[test]
fn a_middlebox_reassembly_section_is_checked_and_kept() {
    let with = |attrs: &str| {
        BASE.replace(
            "mon: { type: middlebox, function: monitor }",
            &format!("mon: {{ type: middlebox, function: ips, config: {{ rules: [] }}, {attrs} }}"),
        ) + "  - { name: a, path: [net, fw, mon, web] }\n"
    };
    let s = parse(&with("reassembly: { udp_fragments: reassemble }")).unwrap();
    let Element::Middlebox { reassembly, .. } = &s.elements["mon"] else {
        panic!("a middlebox")
    };
    assert_eq!(
        reassembly["udp_fragments"].as_str(),
        Some("reassemble"),
        "{reassembly:?}"
    );
    let e = parse(&with("reassembly: { tcp_fragments: reassemble }")).unwrap_err();
    assert!(
        e.contains("elements.mon.reassembly") && e.contains("reassemble"),
        "{e}"
    );
    let e = parse(&with("reassembly: { udp_fragment: drop }")).unwrap_err();
    assert!(
        e.contains("elements.mon.reassembly") && e.contains("udp_fragment"),
        "{e}"
    );
}
