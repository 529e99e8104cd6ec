//! Consolidated groups (CoMb's hyperapps): a group becomes one middlebox
//! crossed where its members were; every way of asking for one that cannot
//! run as one pipeline is refused with the field named.

use sluice_tenant::consolidate::{forward_sources, functions_of, Group, HYPERAPP};
use sluice_tenant::{Affinity, Element, Resources, TenantSpec};

fn parse(text: &str) -> Result<TenantSpec, String> {
    TenantSpec::parse(text, "t.yaml", Some(&sluice_builtin::registry())).map_err(|e| e.to_string())
}

const ELEMENTS: &str = r#"
tenant: t
elements:
  east: { type: external, subnets: [198.51.100.0/24] }
  west: { type: external, subnets: [203.0.113.0/24] }
  web: { type: service, vms: { w1: 10.0.0.1, w2: 10.0.0.2 } }
  db: { type: service, vms: { d1: 10.0.1.1 } }
  fw:
    type: middlebox
    function: firewall
    instances: 2
    resources: { slots: 1, cores: 1 }
    config: { rules: "default allow" }
  ips:
    type: middlebox
    function: ips
    resources: { slots: 1, cores: 2, memory_mib: 512 }
    config: { rules: ['alert tcp any any -> any 80 (msg:"x"; content:"x"; sid:1;)'] }
  mon: { type: middlebox, function: monitor }
  lb:
    type: middlebox
    function: lb
    config: { services: [{ vip: 10.0.0.100, port: 80, backends: [{ addr: "10.0.0.1" }] }] }
"#;

fn spec(chains: &str, consolidate: &str) -> String {
    format!("{ELEMENTS}chains:\n{chains}consolidate:\n{consolidate}")
}

const TWO_CHAINS: &str = "  - { name: e, path: [east, fw, ips, mon, web] }\n  - { name: w, path: [west, fw, ips, web] }\n";

#[test]
fn a_group_becomes_one_middlebox_crossed_where_its_members_were() {
    let s = parse(&spec(
        TWO_CHAINS,
        "  - { name: edge, members: [fw, ips] }\n",
    ))
    .unwrap();
    assert_eq!(
        s.groups,
        [Group {
            name: "edge".into(),
            members: vec!["fw".into(), "ips".into()],
        }]
    );
    assert!(!s.elements.contains_key("fw") && !s.elements.contains_key("ips"));
    assert_eq!(s.chains[0].path, ["east", "edge", "mon", "web"]);
    assert_eq!(s.chains[1].path, ["west", "edge", "web"]);
    let Element::Middlebox {
        function,
        config,
        instances,
        resources,
        ..
    } = &s.elements["edge"]
    else {
        panic!("edge is not a middlebox: {:?}", s.elements["edge"]);
    };
    assert_eq!(function, HYPERAPP);
    // The most any member asks for, and what they take summed.
    assert_eq!(*instances, 2);
    assert_eq!(
        *resources,
        Resources {
            slots: 2,
            cores: 3,
            memory_mib: 512
        }
    );
    let fs = functions_of("edge", function, config);
    let names: Vec<(&str, &str)> = fs
        .iter()
        .map(|f| (f.name.as_str(), f.function.as_str()))
        .collect();
    assert_eq!(names, [("fw", "firewall"), ("ips", "ips")]);
    assert_eq!(fs[0].config["rules"], "default allow");
    // Both chains' sources run forward through the pipeline; replies (from web)
    // in reverse.
    assert_eq!(
        forward_sources(function, config),
        ["198.51.100.0/24", "203.0.113.0/24"]
    );
    // A plain middlebox is one function named after itself, with no sources.
    let Element::Middlebox {
        function, config, ..
    } = &s.elements["mon"]
    else {
        panic!()
    };
    let fs = functions_of("mon", function, config);
    assert_eq!((fs.len(), fs[0].name.as_str()), (1, "mon"));
    assert!(forward_sources(function, config).is_empty());
}

#[test]
fn the_group_may_set_its_instances_resources_and_capacity() {
    let s = parse(&spec(
        TWO_CHAINS,
        "  - name: edge\n    members: [fw, ips]\n    instances: 3\n    resources: { slots: 1, cores: 4 }\n    capacity: { mbps: 500 }\n",
    ))
    .unwrap();
    let Element::Middlebox {
        instances,
        resources,
        capacity,
        ..
    } = &s.elements["edge"]
    else {
        panic!()
    };
    assert_eq!((*instances, resources.cores), (3, 4));
    assert_eq!(capacity.as_ref().and_then(|c| c.mbps), Some(500.0));
}

#[test]
fn the_v1_format_takes_consolidate_under_spec() {
    let text = spec(TWO_CHAINS, "  - { name: edge, members: [fw, ips] }\n");
    let v1 = format!(
        "apiVersion: sluice.dev/v1\nkind: Tenant\nmetadata: {{ name: t }}\nspec:\n{}",
        text.lines()
            .skip_while(|l| !l.starts_with("elements:"))
            .map(|l| format!("  {l}\n"))
            .collect::<String>()
    );
    let s = parse(&v1).unwrap_or_else(|e| panic!("{e}\n{v1}"));
    assert_eq!(s.groups.len(), 1);
    assert_eq!(s.chains[1].path, ["west", "edge", "web"]);
}

#[test]
fn each_group_that_cannot_be_one_pipeline_is_refused_with_its_field() {
    let cases: &[(&str, &str, &str)] = &[
        (TWO_CHAINS, "  - { name: edge, members: [fw] }\n", "consolidate[0].members: a group consolidates two or more"),
        (TWO_CHAINS, "  - { name: web, members: [fw, ips] }\n", "consolidate[0].name: `web` is already an element's name"),
        (TWO_CHAINS, "  - { members: [fw, ips] }\n", "consolidate[0].name: missing"),
        (TWO_CHAINS, "  - { name: e, members: [fw, ips], colour: red }\n", "consolidate[0].colour: unknown key"),
        (TWO_CHAINS, "  - { name: edge, members: [fw, nope] }\n", "consolidate[0].members[1]: unknown element `nope`"),
        (TWO_CHAINS, "  - { name: edge, members: [fw, web] }\n", "consolidate[0].members[1]: `web` is a service, not a middlebox"),
        (TWO_CHAINS, "  - { name: edge, members: [fw, fw] }\n", "consolidate[0].members[1]: `fw` is listed twice"),
        (
            TWO_CHAINS,
            "  - { name: a, members: [fw, ips] }\n  - { name: b, members: [ips, mon] }\n",
            "consolidate[1].members[0]: `ips` is already a member of consolidate[0]",
        ),
        (
            "  - { name: e, path: [east, fw, lb, web] }\n",
            "  - { name: edge, members: [fw, lb] }\n",
            "consolidate[0].members[1]: `lb` is a load balancer",
        ),
        // w crosses fw but not ips.
        (
            "  - { name: e, path: [east, fw, ips, web] }\n  - { name: w, path: [west, fw, web] }\n",
            "  - { name: edge, members: [fw, ips] }\n",
            "chains[1].path: chain `w` crosses `fw` of group `edge` (consolidate[0]), so it must cross all of fw, ips",
        ),
        // The wrong order.
        (
            "  - { name: e, path: [east, ips, fw, web] }\n",
            "  - { name: edge, members: [fw, ips] }\n",
            "chains[0].path: chain `e` crosses `ips` of group `edge`",
        ),
        (
            "  - { name: e, path: [east, fw, ips, web], mirror: [mon] }\n",
            "  - { name: edge, members: [ips, mon] }\n",
            "chains[0].mirror[0]: `mon` is consolidated in `edge`",
        ),
        // web -> db starts where e's replies come from.
        (
            "  - { name: e, path: [east, fw, ips, web] }\n  - { name: d, path: [web, fw, ips, db] }\n",
            "  - { name: edge, members: [fw, ips] }\n",
            "chains[0]: the replies of chain `e` come from `web`, which is also where chain `d` starts",
        ),
    ];
    for (chains, groups, want) in cases {
        let e = parse(&spec(chains, groups)).expect_err(want);
        assert!(e.contains(want), "want {want:?}, got {e:?}");
        assert!(e.starts_with("t.yaml: "), "{e}");
    }
    // One-way, the same two chains are fine: nothing comes back from web.
    parse(&spec(
        "  - { name: e, path: [east, fw, ips, web], bidirectional: false }\n  - { name: d, path: [web, fw, ips, db] , bidirectional: false }\n",
        "  - { name: edge, members: [fw, ips] }\n",
    ))
    .unwrap();
}

#[test]
fn a_group_with_a_pinned_member_is_pinned() {
    // The IPS is pinned by default (shared state), the firewall hashed: the
    // group they share is pinned, as its IPS needs.
    let s = parse(&spec(
        TWO_CHAINS,
        "  - { name: edge, members: [fw, ips] }\n",
    ))
    .unwrap();
    match &s.elements["edge"] {
        Element::Middlebox { affinity, .. } => assert_eq!(*affinity, Affinity::Pinned),
        e => panic!("edge: {e:?}"),
    }
    // Without the IPS's default, the group hashes as its members do.
    let text = spec(TWO_CHAINS, "  - { name: edge, members: [fw, ips] }\n").replace(
        "    function: ips\n",
        "    function: ips\n    affinity: hash\n",
    );
    match &parse(&text).unwrap().elements["edge"] {
        Element::Middlebox { affinity, .. } => assert_eq!(*affinity, Affinity::Hash),
        e => panic!("edge: {e:?}"),
    }
}

#[test]
fn members_must_agree_on_how_their_shared_instances_run() {
    let text = spec(TWO_CHAINS, "  - { name: edge, members: [fw, ips] }\n").replace(
        "    function: ips\n",
        "    function: ips\n    state: local\n",
    );
    let e = parse(&text).unwrap_err();
    assert!(
        e.contains("consolidate[0].members[1]: `ips`'s state differs from `fw`'s"),
        "{e}"
    );
    let text = spec(TWO_CHAINS, "  - { name: edge, members: [fw, ips] }\n").replace(
        "    function: ips\n",
        "    function: ips\n    capacity: { mbps: 10 }\n",
    );
    let e = parse(&text).unwrap_err();
    assert!(
        e.contains("`ips` declares a capacity, which would budget the whole group: give it as consolidate[0].capacity"),
        "{e}"
    );
}
