//! Blocks on request through the data plane: the controller's compiled FIBs
//! of a chained tenant (a1 and a2 on host 1, through a monitor on host 1, to
//! b1 on host 2) with a block of a1 -> b1 added, as the controller pushes
//! them. The sending host drops a1's packets where they leave its port,
//! before the chain; the receiving host drops them when they arrive anyway
//! (a sending agent that ignored the block); a2 still reaches b1; removing
//! the block restores a1's traffic.

use std::net::{Ipv4Addr, SocketAddrV4};

use super::*;
use sluice_controller::blocks::{self, Block};
use sluice_controller::{compile, Placement};
use sluice_proto::{
    InstanceConfig, InstanceHeartbeat, Peer, PortConfig, PortKind, TenantFib, GENEVE_PORT,
};
use sluice_switch::tunnel::fabric_header;
use sluice_switch::{HostId, PortId};
use sluice_tenant::TenantSpec;
use sluice_wire::build;

const VNI: u32 = 77;
const SPEC: &str = "tenant: acme
elements:
  a: { type: service, vms: { a1: 10.0.0.1, a2: 10.0.0.3 } }
  b: { type: service, vms: { b1: 10.0.0.2 } }
  mon: { type: middlebox, function: monitor }
chains:
  - { name: ab, path: [a, mon, b] }
";
const A1: [u8; 4] = [10, 0, 0, 1];
const A2: [u8; 4] = [10, 0, 0, 3];
const B1: [u8; 4] = [10, 0, 0, 2];

fn underlay(h: u32) -> Ipv4Addr {
    Ipv4Addr::new(10, 255, 0, h as u8)
}

fn vm_port(id: u16, name: &str) -> PortConfig {
    PortConfig {
        id,
        vni: VNI,
        kind: PortKind::Vm {
            name: name.into(),
            iface: format!("p{id}"),
            mac: format!("02:00:00:00:00:{id:02x}"),
            weight: 1,
        },
    }
}

/// Host `h`'s configuration, with the block of a1 -> b1 if `blocked`.
fn config(h: u32, blocked: bool) -> AgentConfig {
    let spec = TenantSpec::parse(SPEC, "acme.yaml", Some(&sluice_builtin::registry())).unwrap();
    let (h1, h2) = (HostId(1), HostId(2));
    let mut p = Placement {
        vni: VNI,
        ..Placement::default()
    };
    p.vms.insert("a1".into(), (h1, PortId(1)));
    p.vms.insert("a2".into(), (h1, PortId(3)));
    p.vms.insert("b1".into(), (h2, PortId(2)));
    p.instances.insert("mon".into(), vec![(h1, PortId(10))]);
    let c = compile(&spec, &p).unwrap();
    let mut hf = c.hosts[&HostId(h)].clone();
    if blocked {
        let b = Block {
            id: 1,
            tenant: "acme".into(),
            vm: "b1".into(),
            from: "a1".into(),
            prefix: "10.0.0.1/32".into(),
            comment: None,
            created_at_ms: 0,
            created_by: "acme-ci".into(),
        };
        hf.entries.extend(blocks::entries(&spec, VNI, [&b]));
    }
    let (ports, instances) = if h == 1 {
        let inst = PortConfig {
            id: 10,
            vni: VNI,
            kind: PortKind::Instance {
                name: "acme/mon/0".into(),
            },
        };
        let ic = InstanceConfig {
            name: "acme/mon/0".into(),
            tenant: "acme".into(),
            middlebox: "mon".into(),
            port: 10,
            vni: VNI,
            chain_yaml: String::new(),
            state: "local".into(),
            state_password: None,
            backends: Vec::new(),
        };
        (vec![vm_port(1, "a1"), vm_port(3, "a2"), inst], vec![ic])
    } else {
        (vec![vm_port(2, "b1")], vec![])
    };
    AgentConfig {
        pardons: Vec::new(),
        health_checks: Vec::new(),
        version: if blocked { 2 } else { 3 },
        host: h,
        peers: (1..=2)
            .map(|host| Peer {
                host,
                underlay: underlay(host),
            })
            .collect(),
        ports,
        tenants: vec![TenantFib {
            tenant: "acme".into(),
            vni: VNI,
            entries: hf.entries,
            groups: hf.groups.into_iter().map(|(g, gr)| (g.0, gr)).collect(),
            senders: Some(vec![if h == 1 { 2 } else { 1 }]),
            sources: None,
            chains: Vec::new(),
        }],
        instances,
        group_policies: vec![],
        fabric_auth: None,
    }
}

/// A UDP frame from `src` to `dst` as a VM sends it.
fn frame(src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
    let mut f = build::udp_v4(src, dst, 4000, 5000, b"unwanted?");
    f[..6].copy_from_slice(&ROUTER_MAC);
    f
}

/// Where `dp`'s host sends a frame its VM on `port` sends.
fn send(dp: &mut Dataplane, port: u16, f: Vec<u8>) -> Vec<Dest> {
    let mut plan = TxPlan::new();
    dp.process_vm_batch(port, &vec![(f, None)], &mut plan);
    plan.outs.iter().map(|o| o.dest).collect()
}

/// What host 2 does with `inner` arriving from host 1 at the chain's last
/// hop (the monitor passed it): where it goes.
fn arrive(dp: &mut Dataplane, inner: &[u8]) -> Vec<Dest> {
    let (h, n) = fabric_header(VNI, Some((0, 2)), None, None);
    let mut d = h[..n].to_vec();
    d.extend_from_slice(inner);
    let mut batch = vec![(d, Some(SocketAddrV4::new(underlay(1), GENEVE_PORT)))];
    let mut plan = TxPlan::new();
    dp.process_udp_batch(&mut batch, &mut plan);
    plan.outs.iter().map(|o| o.dest).collect()
}

/// Heartbeats from the monitor, so that it gets flows.
fn ready(dp: &mut Dataplane) {
    let hb = InstanceHeartbeat {
        seq: 1,
        ..InstanceHeartbeat::default()
    };
    let from = SocketAddrV4::new(sluice_proto::instance_link(10).unwrap().1, GENEVE_PORT);
    let mut batch = vec![(hb.encode().to_vec(), Some(from))];
    dp.process_udp_batch(&mut batch, &mut TxPlan::new());
}

#[test]
fn a_block_drops_at_the_sender_and_again_at_the_receiver() {
    let mon = Dest::Udp(SocketAddrV4::new(
        sluice_proto::instance_link(10).unwrap().1,
        GENEVE_PORT,
    ));
    let mut tx = Dataplane::new(1, &config(1, true)).unwrap();
    ready(&mut tx);
    let mut rx = Dataplane::new(2, &config(2, true)).unwrap();

    // At the source: a1's packet to b1 is dropped before the chain takes
    // it (nothing goes to the monitor, nothing to the fabric), counted
    // against a1's port as `blocked`.
    assert_eq!(send(&mut tx, 1, frame(A1, B1)), vec![]);
    assert_eq!(tx.stats().drops_of(DropReason::Blocked), 1);
    assert_eq!(tx.stats().ports[&1].drops, 1);
    assert_eq!(DropReason::Blocked.name(), "blocked");
    // a2 is not blocked: its packet enters the chain.
    assert_eq!(send(&mut tx, 3, frame(A2, B1)), vec![mon]);
    // Nor is a1's traffic to anyone else.
    assert_eq!(send(&mut tx, 1, frame(A1, A2)), vec![Dest::Vm(3)]);
    assert_eq!(tx.stats().drops_of(DropReason::Blocked), 1);

    // At the destination: host 1 ignored the block and sent a1's packet
    // through; host 2 drops it before b1 sees it, counted on the fabric.
    assert_eq!(arrive(&mut rx, &frame(A1, B1)), vec![]);
    assert_eq!(rx.stats().drops_of(DropReason::Blocked), 1);
    assert_eq!(rx.stats().fabric.drops, 1);
    // a2's packet is delivered to b1.
    assert_eq!(arrive(&mut rx, &frame(A2, B1)), vec![Dest::Vm(2)]);
    // b1's reply to a1 is not what the block is about.
    let reply = send(&mut rx, 2, frame(B1, A1));
    assert_eq!(reply.len(), 1, "{reply:?}");
    assert_eq!(rx.stats().drops_of(DropReason::Blocked), 1);

    // The block removed (a new configuration): a1's traffic flows again.
    let mut tx2 = Dataplane::new(1, &config(1, false)).unwrap();
    tx2.inherit_stats(&tx);
    ready(&mut tx2);
    assert_eq!(send(&mut tx2, 1, frame(A1, B1)), vec![mon]);
    let mut rx2 = Dataplane::new(2, &config(2, false)).unwrap();
    rx2.inherit_stats(&rx);
    assert_eq!(arrive(&mut rx2, &frame(A1, B1)), vec![Dest::Vm(2)]);
    assert_eq!(tx2.stats().drops_of(DropReason::Blocked), 1, "counts kept");
    assert_eq!(rx2.stats().drops_of(DropReason::Blocked), 1);
}

#[test]
fn replayed_lookups_keep_dropping_a_blocked_flow() {
    // A run of one flow in one batch replays the first lookup: every packet
    // of it is counted as blocked.
    let mut tx = Dataplane::new(1, &config(1, true)).unwrap();
    let batch: Vec<(Vec<u8>, Option<SocketAddrV4>)> =
        (0..5).map(|_| (frame(A1, B1), None)).collect();
    let mut plan = TxPlan::new();
    tx.process_vm_batch(1, &batch, &mut plan);
    assert!(plan.outs.is_empty());
    assert_eq!(tx.stats().drops_of(DropReason::Blocked), 5);
    assert_eq!(tx.stats().drops_of(DropReason::Malformed), 0);
}
