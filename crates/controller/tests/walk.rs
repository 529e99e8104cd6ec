//! The Figure 4 tenant compiled onto three hosts, and packets walked through the
//! resulting distributed switch: every chain visits its middleboxes in order (and in
//! reverse for replies, on the same instances), mirrors reach the monitor, and
//! traffic in no chain goes straight to its destination.

use std::collections::BTreeMap;

use sluice_controller::{compile, Placement};
use sluice_switch::{Fib, HostId, LookupKey, Output, PortId};
use sluice_tenant::TenantSpec;
use sluice_wire::build;
use sluice_wire::parse::parse_frame;
use sluice_wire::rewrite::{set_endpoint, Endpoint};
use sluice_wire::tcp::flags::{ACK, SYN};
use sluice_wire::IpAddr;

const VNI: u32 = 42;

#[derive(Debug, Clone, PartialEq)]
enum Role {
    Gateway,
    Vm(&'static str),
    Instance(&'static str, usize),
}

struct Net {
    fibs: BTreeMap<HostId, Fib>,
    roles: BTreeMap<(HostId, PortId), Role>,
}

#[derive(Debug, Default, PartialEq)]
struct Walk {
    visited: Vec<(&'static str, usize)>,
    mirrored: usize,
    /// Where each mirror copy ended: the role of the port it left by (on
    /// its own host, or on the host the fabric carried it to).
    mirrors_reached: Vec<Option<Role>>,
    delivered: Option<Role>,
    frame: Vec<u8>,
}

const VIP_A: [u8; 4] = [10, 10, 1, 100];
const VIP_B: [u8; 4] = [10, 10, 2, 100];

fn place() -> (Placement, BTreeMap<(HostId, PortId), Role>) {
    let (h1, h2, h3) = (HostId(1), HostId(2), HostId(3));
    let mut p = Placement {
        gateway: (h1, PortId(1)),
        vni: VNI,
        ..Placement::default()
    };
    let mut roles = BTreeMap::new();
    roles.insert((h1, PortId(1)), Role::Gateway);
    for (vm, h, port) in [
        ("web-a1", h2, 20),
        ("web-b1", h2, 21),
        ("web-a2", h3, 20),
        ("web-b2", h3, 21),
    ] {
        p.vms.insert(vm.into(), (h, PortId(port)));
        roles.insert((h, PortId(port)), Role::Vm(vm));
    }
    let inst: [(&'static str, Vec<(HostId, u16)>); 5] = [
        ("fw", vec![(h1, 10), (h2, 10)]),
        ("ips", vec![(h1, 11)]),
        ("mon", vec![(h1, 12)]),
        ("lb-a", vec![(h2, 11)]),
        ("lb-b", vec![(h3, 12)]),
    ];
    for (mb, list) in inst {
        let v: Vec<(HostId, PortId)> = list.iter().map(|&(h, port)| (h, PortId(port))).collect();
        for (i, hp) in v.iter().enumerate() {
            roles.insert(*hp, Role::Instance(mb, i));
        }
        p.instances.insert(mb.into(), v);
    }
    (p, roles)
}

fn net() -> Net {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/tenant/figure4.yaml"
    ))
    .unwrap();
    let spec = TenantSpec::parse(&text, "figure4.yaml", Some(&sluice_builtin::registry())).unwrap();
    let (place, roles) = place();
    let c = compile(&spec, &place).unwrap();
    let mut fibs = BTreeMap::new();
    for (h, hf) in c.hosts {
        let mut f = Fib::new();
        f.replace(hf.entries, hf.groups, 1).unwrap();
        fibs.insert(h, f);
    }
    Net { fibs, roles }
}

/// The load balancers, as the walk sees them: VIP to the first backend and back.
fn lb(mb: &str, frame: &mut [u8]) {
    let (vip, backend) = match mb {
        "lb-a" => (VIP_A, [10, 10, 1, 11]),
        _ => (VIP_B, [10, 10, 2, 11]),
    };
    let mut m = parse_frame(frame).unwrap();
    if m.flow.dst == IpAddr::V4(vip) {
        let port = m.flow.dst_port;
        set_endpoint(frame, &mut m, Endpoint::Dst, IpAddr::V4(backend), port).unwrap();
    } else if m.flow.src == IpAddr::V4(backend) {
        let port = m.flow.src_port;
        set_endpoint(frame, &mut m, Endpoint::Src, IpAddr::V4(vip), port).unwrap();
    }
}

/// Where a mirror copy sent to `o` from `host`, carrying `mark`, ends: the
/// role of the port it leaves by (one fabric crossing at most).
fn follow_mirror(
    net: &mut Net,
    host: HostId,
    o: Output,
    mark: Option<(u16, u8)>,
    frame: &[u8],
) -> Option<Role> {
    let (host, port) = match o {
        Output::Port(p) => (host, p),
        Output::Host(h) => {
            let meta = parse_frame(frame).unwrap();
            let fib = net.fibs.get_mut(&h).expect("host has a FIB");
            let d = fib.lookup(&LookupKey {
                in_port: None,
                vni: VNI,
                chain_hop: mark,
                meta: &meta,
            });
            match d.output {
                Some(Output::Port(p)) => (h, p),
                _ => return None,
            }
        }
    };
    net.roles.get(&(host, port)).cloned()
}

fn walk(net: &mut Net, host: HostId, port: PortId, frame: Vec<u8>) -> Walk {
    let mut w = Walk {
        frame,
        ..Walk::default()
    };
    let (mut host, mut in_port, mut mark) = (host, Some(port), None);
    for _ in 0..32 {
        let meta = parse_frame(&w.frame).unwrap();
        let fib = net.fibs.get_mut(&host).expect("host has a FIB");
        let d = fib.lookup(&LookupKey {
            in_port,
            vni: VNI,
            chain_hop: mark,
            meta: &meta,
        });
        w.mirrored += d.mirrors.len();
        for &(o, m) in &d.mirrors {
            let reached = follow_mirror(net, host, o, m.or(d.chain_hop), &w.frame);
            w.mirrors_reached.push(reached);
        }
        match d.output {
            None => return w,
            Some(Output::Host(h)) => {
                assert_ne!(h, host, "a tunnel to itself");
                host = h;
                in_port = None;
                mark = d.chain_hop;
            }
            Some(Output::Port(p)) => match net.roles.get(&(host, p)).cloned() {
                Some(Role::Instance(mb, i)) => {
                    w.visited.push((mb, i));
                    if mb.starts_with("lb") {
                        lb(mb, &mut w.frame);
                    }
                    in_port = Some(p);
                    mark = d.chain_hop;
                }
                Some(r) => {
                    w.delivered = Some(r);
                    return w;
                }
                None => panic!("output to unknown port {p:?} on {host:?}"),
            },
        }
    }
    panic!("forwarding loop: {w:?}");
}

fn names(w: &Walk) -> Vec<&'static str> {
    w.visited.iter().map(|v| v.0).collect()
}

#[test]
fn chains_visit_their_middleboxes_both_ways() {
    let mut n = net();
    let gw = (HostId(1), PortId(1));
    for i in 0..40u8 {
        let client = [198, 51, 100, i + 1];
        let syn = build::tcp_v4(client, VIP_A, 40_000 + i as u16, 80, 1, 0, SYN, b"");
        let fwd = walk(&mut n, gw.0, gw.1, syn);
        assert_eq!(names(&fwd), vec!["fw", "ips", "lb-a"], "east-to-a");
        assert_eq!(fwd.delivered, Some(Role::Vm("web-a1")));
        assert_eq!(fwd.mirrored, 1, "a copy to the monitor");
        assert_eq!(fwd.mirrors_reached, [Some(Role::Instance("mon", 0))]);
        // The reply, from the backend, crosses the same instances in reverse.
        let reply = build::tcp_v4(
            [10, 10, 1, 11],
            client,
            80,
            40_000 + i as u16,
            9,
            2,
            SYN | ACK,
            b"",
        );
        let back = walk(&mut n, HostId(2), PortId(20), reply);
        assert_eq!(names(&back), vec!["lb-a", "ips", "fw"]);
        assert_eq!(back.delivered, Some(Role::Gateway));
        // The reply's copy is taken on the backend's host and crosses the
        // fabric to the monitor's: it reaches the monitor, not the chain.
        assert_eq!(
            back.mirrors_reached,
            [Some(Role::Instance("mon", 0))],
            "the reply's mirror copy"
        );
        assert_eq!(
            back.visited[2], fwd.visited[0],
            "both directions use one firewall instance"
        );
        let m = parse_frame(&back.frame).unwrap();
        assert_eq!(
            m.flow.src,
            IpAddr::V4(VIP_A),
            "the client sees the VIP answer"
        );
    }
    // Both firewall instances take a share of the flows.
    let mut used = std::collections::BTreeSet::new();
    for i in 0..40u8 {
        let syn = build::tcp_v4(
            [198, 51, 100, i + 1],
            VIP_A,
            40_000 + i as u16,
            80,
            1,
            0,
            SYN,
            b"",
        );
        used.insert(walk(&mut n, gw.0, gw.1, syn).visited[0].1);
    }
    assert_eq!(used.len(), 2);
}

#[test]
fn other_chains_and_unchained_traffic() {
    let mut n = net();
    let gw = (HostId(1), PortId(1));
    let w = walk(
        &mut n,
        gw.0,
        gw.1,
        build::tcp_v4([203, 0, 113, 9], VIP_B, 5000, 80, 1, 0, SYN, b""),
    );
    assert_eq!(names(&w), vec!["fw", "lb-b"], "west-to-b");
    assert_eq!(w.delivered, Some(Role::Vm("web-b1")));
    assert_eq!(w.mirrored, 0);
    let w = walk(
        &mut n,
        gw.0,
        gw.1,
        build::tcp_v4([203, 0, 113, 9], VIP_A, 5001, 80, 1, 0, SYN, b""),
    );
    assert_eq!(names(&w), vec!["fw", "ips", "lb-a"], "west-to-a");
    // Not HTTP: in no chain, so forwarded straight to the VM.
    let w = walk(
        &mut n,
        gw.0,
        gw.1,
        build::tcp_v4([198, 51, 100, 7], [10, 10, 1, 12], 5002, 22, 1, 0, SYN, b""),
    );
    assert!(w.visited.is_empty());
    assert_eq!(w.delivered, Some(Role::Vm("web-a2")));
    // VM to VM across hosts, in no chain.
    let w = walk(
        &mut n,
        HostId(3),
        PortId(20),
        build::udp_v4([10, 10, 1, 12], [10, 10, 2, 11], 1, 2, b"x"),
    );
    assert!(w.visited.is_empty());
    assert_eq!(w.delivered, Some(Role::Vm("web-b1")));
    // Established traffic follows the same path as its SYN.
    let w = walk(
        &mut n,
        gw.0,
        gw.1,
        build::tcp_v4([203, 0, 113, 9], VIP_B, 5000, 80, 2, 1, ACK, b"GET /"),
    );
    assert_eq!(names(&w), vec!["fw", "lb-b"]);
}

#[test]
fn unplaced_elements_are_errors() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/tenant/figure4.yaml"
    ))
    .unwrap();
    let spec = TenantSpec::parse(&text, "figure4.yaml", None).unwrap();
    let (mut p, _) = place();
    p.instances.remove("ips");
    assert_eq!(
        compile(&spec, &p).unwrap_err().to_string(),
        "middlebox `ips` has no instance placed"
    );
    let (mut p, _) = place();
    p.vms.remove("web-b2");
    assert_eq!(
        compile(&spec, &p).unwrap_err().to_string(),
        "VM `web-b2` is not placed on any host"
    );
}

/// The chain ids the compiled entries mark packets with name the spec's
/// chains (what the agents' metrics label them with): chain `i` is `2i`,
/// its replies `2i + 1`, and every id an entry sets has a name.
#[test]
fn every_chain_id_the_entries_set_has_its_chains_name() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/tenant/figure4.yaml"
    ))
    .unwrap();
    let spec = TenantSpec::parse(&text, "figure4.yaml", Some(&sluice_builtin::registry())).unwrap();
    let names = sluice_controller::compile::chain_names(&spec);
    let show: Vec<(u16, &str, bool)> = names
        .iter()
        .map(|c| (c.id, c.name.as_str(), c.reverse))
        .collect();
    assert_eq!(
        show,
        [
            (0, "east-to-a", false),
            (1, "east-to-a", true),
            (2, "west-to-a", false),
            (3, "west-to-a", true),
            (4, "west-to-b", false),
            (5, "west-to-b", true)
        ]
    );
    let (place, _) = place();
    let c = compile(&spec, &place).unwrap();
    let mut set: Vec<u16> = c
        .hosts
        .values()
        .flat_map(|h| &h.entries)
        .flat_map(|e| &e.actions)
        .filter_map(|a| match a {
            sluice_switch::Action::SetChainHop { chain, .. } => Some(*chain),
            _ => None,
        })
        .collect();
    set.sort();
    set.dedup();
    assert!(!set.is_empty());
    for id in set {
        assert!(
            names.iter().any(|c| c.id == id),
            "chain id {id} has no name"
        );
    }
}
