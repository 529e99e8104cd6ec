//! The data plane's unit tests: whole configurations (the Figure 4 tenant's
//! host 1, two VMs) driven through batches, as the I/O loop drives them.

use std::net::{Ipv4Addr, SocketAddrV4};

use super::*;
use sluice_controller::{compile, Placement};
use sluice_proto::{InstanceConfig, Peer, PortConfig, TenantFib};
use sluice_proto::{InstanceHeartbeat, PortKind, GENEVE_PORT};
use sluice_switch::tunnel::{geneve_header, parse_fabric_payload};
use sluice_switch::{Action, Entry, HostId, Match, Prefix};
use sluice_switch::{GroupId, Output, PortId};
use sluice_tenant::TenantSpec;
use sluice_wire::build;
use sluice_wire::tcp::flags::SYN;

const VNI: u32 = 42;
pub(super) const VIP_A: [u8; 4] = [10, 10, 1, 100];
pub(super) const GW_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

pub(super) fn underlay(h: u32) -> Ipv4Addr {
    Ipv4Addr::new(10, 255, 0, h as u8)
}

fn peers() -> Vec<Peer> {
    (1..=3)
        .map(|h| Peer {
            host: h,
            underlay: underlay(h),
        })
        .collect()
}

pub(super) fn inst_addr(port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(sluice_proto::instance_link(port).unwrap().1, GENEVE_PORT)
}

/// Host 1 of the Figure 4 tenant as in crates/controller/tests/walk.rs: the
/// gateway on port 1, fw/0 on 10, ips on 11, mon on 12 (fw/1 on host 2).
pub(super) fn figure4_host1() -> AgentConfig {
    figure4_host(1)
}

/// Host `h` (1 or 2) of the Figure 4 tenant: host 1 as [`figure4_host1`];
/// host 2 with web-a1 on port 20, web-b1 on 21, fw/1 on 10 and lb-a on 11.
fn figure4_host(h: u32) -> AgentConfig {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/tenant/figure4.yaml"
    ))
    .unwrap();
    let spec = TenantSpec::parse(&text, "figure4.yaml", Some(&sluice_builtin::registry())).unwrap();
    let (h1, h2, h3) = (HostId(1), HostId(2), HostId(3));
    let mut p = Placement {
        gateway: (h1, PortId(1)),
        vni: VNI,
        ..Placement::default()
    };
    for (vm, h, port) in [
        ("web-a1", h2, 20),
        ("web-b1", h2, 21),
        ("web-a2", h3, 20),
        ("web-b2", h3, 21),
    ] {
        p.vms.insert(vm.into(), (h, PortId(port)));
    }
    for (mb, list) in [
        ("fw", vec![(h1, 10), (h2, 10)]),
        ("ips", vec![(h1, 11)]),
        ("mon", vec![(h1, 12)]),
        ("lb-a", vec![(h2, 11)]),
        ("lb-b", vec![(h3, 12)]),
    ] {
        p.instances.insert(
            mb.into(),
            list.iter().map(|&(h, port)| (h, PortId(port))).collect(),
        );
    }
    let c = compile(&spec, &p).unwrap();
    let hf = c.hosts[&HostId(h)].clone();
    // (port, VM name, MAC) and (port, instance name).
    type Vms = &'static [(u16, &'static str, &'static str)];
    type Instances = &'static [(u16, &'static str)];
    let (vms, here): (Vms, Instances) = match h {
        1 => (
            &[(1, "gw", "02:00:00:00:00:01")],
            &[(10, "acme/fw/0"), (11, "acme/ips/0"), (12, "acme/mon/0")],
        ),
        2 => (
            &[
                (20, "web-a1", "02:00:00:00:02:20"),
                (21, "web-b1", "02:00:00:00:02:21"),
            ],
            &[(10, "acme/fw/1"), (11, "acme/lb-a/0")],
        ),
        _ => panic!("host {h} is not modelled"),
    };
    let mut ports: Vec<PortConfig> = vms
        .iter()
        .map(|&(id, name, mac)| PortConfig {
            id,
            vni: VNI,
            kind: PortKind::Vm {
                name: name.into(),
                iface: format!("{name}0"),
                mac: mac.into(),
                weight: 1,
            },
        })
        .collect();
    let mut instances = Vec::new();
    for &(id, name) in here {
        ports.push(PortConfig {
            id,
            vni: VNI,
            kind: PortKind::Instance { name: name.into() },
        });
        instances.push(InstanceConfig {
            name: name.into(),
            tenant: "acme".into(),
            middlebox: name.split('/').nth(1).unwrap().into(),
            port: id,
            vni: VNI,
            chain_yaml: String::new(),
            state: "local".into(),
            state_password: None,
            backends: Vec::new(),
        });
    }
    AgentConfig {
        pardons: Vec::new(),
        health_checks: Vec::new(),
        version: 1,
        host: h,
        peers: peers(),
        ports,
        tenants: vec![TenantFib {
            tenant: "acme".into(),
            vni: VNI,
            entries: hf.entries,
            groups: hf.groups.into_iter().map(|(g, gr)| (g.0, gr)).collect(),
            senders: None,
            sources: None,
            chains: Vec::new(),
        }],
        instances,
        group_policies: vec![],
        fabric_auth: None,
    }
}

/// Two VMs on ports 1 and 2 forwarding to each other by destination, and from
/// the fabric to VM 2.
pub(super) fn two_vms() -> AgentConfig {
    let vm = |id: u16, mac: &str| PortConfig {
        id,
        vni: 7,
        kind: PortKind::Vm {
            name: format!("vm{id}"),
            iface: format!("p{id}"),
            mac: mac.into(),
            // Port 2 weighs 2: weights reach the rate controllers.
            weight: id,
        },
    };
    let to = |id: u64, dst: &str, port: u16| Entry {
        id,
        priority: 10,
        m: Match {
            dst: Some(Prefix::parse(dst).unwrap()),
            ..Match::default()
        },
        actions: vec![Action::Output(Output::Port(PortId(port)))],
    };
    AgentConfig {
        pardons: Vec::new(),
        health_checks: Vec::new(),
        version: 5,
        host: 1,
        peers: peers(),
        ports: vec![vm(1, "02:00:00:00:01:01"), vm(2, "02:00:00:00:01:02")],
        tenants: vec![TenantFib {
            tenant: "t".into(),
            vni: 7,
            entries: vec![
                to(1, "10.0.0.1/32", 1),
                to(2, "10.0.0.2/32", 2),
                Entry {
                    id: 3,
                    priority: 5,
                    m: Match {
                        dst: Some(Prefix::parse("10.9.0.0/16").unwrap()),
                        ..Match::default()
                    },
                    actions: vec![Action::Output(Output::Host(HostId(3)))],
                },
            ],
            groups: vec![],
            senders: None,
            sources: None,
            chains: Vec::new(),
        }],
        instances: vec![],
        group_policies: vec![],
        fabric_auth: None,
    }
}

fn frames(list: Vec<Vec<u8>>) -> Vec<(Vec<u8>, Option<SocketAddrV4>)> {
    list.into_iter().map(|f| (f, None)).collect()
}

pub(super) fn from(addr: SocketAddrV4, list: Vec<Vec<u8>>) -> Vec<(Vec<u8>, Option<SocketAddrV4>)> {
    list.into_iter().map(|f| (f, Some(addr))).collect()
}

pub(super) fn with_macs(mut f: Vec<u8>, dst: [u8; 6], src: [u8; 6]) -> Vec<u8> {
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f
}

struct G {
    vni: u32,
    chain_hop: Option<(u16, u8)>,
    header_len: usize,
}

fn parse(d: &[u8]) -> G {
    let (vni, chain_hop, header_len) = sluice_switch::tunnel::parse_geneve_payload(d).unwrap();
    G {
        vni,
        chain_hop,
        header_len,
    }
}

fn encap(vni: u32, ch: Option<(u16, u8)>, inner: &[u8]) -> Vec<u8> {
    let (h, n) = geneve_header(vni, ch);
    let mut v = h[..n].to_vec();
    v.extend_from_slice(inner);
    v
}

/// Heartbeats from the instances on `ports`, at the data plane's clock.
fn ready(dp: &mut Dataplane, ports: &[u16]) {
    let mut plan = TxPlan::new();
    for p in ports {
        dp.process_udp_batch(&mut heartbeat_from(*p), &mut plan);
    }
    assert!(plan.outs.is_empty(), "heartbeats are not forwarded");
}

#[test]
fn instances_get_new_flows_once_they_heartbeat() {
    let mut dp = Dataplane::new(1, &figure4_host1()).unwrap();
    let host2 = Dest::Udp(SocketAddrV4::new(underlay(2), GENEVE_PORT));
    // fw/0 (port 10) is still starting: host 2's firewall takes every flow.
    for i in 1..=30 {
        assert_eq!(fw_dest(&mut dp, i), Some(host2));
    }
    ready(&mut dp, &[10]);
    let now: Vec<Option<Dest>> = (1..=30).map(|i| fw_dest(&mut dp, i)).collect();
    assert!(now.contains(&Some(Dest::Udp(inst_addr(10)))));
    // The IPS (port 11), alone in its group, is used while starting.
    assert!(!dp.suspected(11));
}

#[test]
fn client_goes_to_first_hop_and_returns_to_the_next() {
    let mut dp = Dataplane::new(1, &figure4_host1()).unwrap();
    ready(&mut dp, &[10, 11, 12]);
    let mut plan = TxPlan::new();
    // Find a client flow the hash sends to the local firewall instance.
    let fw0 = inst_addr(10);
    let mut found = None;
    for i in 1..=60u8 {
        let syn = with_macs(
            build::tcp_v4(
                [198, 51, 100, i],
                VIP_A,
                40_000 + i as u16,
                80,
                1,
                0,
                SYN,
                b"",
            ),
            ROUTER_MAC,
            GW_MAC,
        );
        let batch = frames(vec![syn.clone()]);
        plan.clear();
        dp.process_vm_batch(1, &batch, &mut plan);
        // One copy to the monitor, one to a firewall instance.
        assert_eq!(plan.outs.len(), 2, "{:?}", plan.outs);
        let mon = plan.outs[0];
        assert_eq!(mon.dest, Dest::Udp(inst_addr(12)));
        let fw = *plan.outs.last().unwrap();
        match fw.dest {
            Dest::Udp(a) if a == fw0 => {
                found = Some((syn, plan.message(&batch, &fw)));
                break;
            }
            Dest::Udp(a) => assert_eq!(a, SocketAddrV4::new(underlay(2), GENEVE_PORT)),
            d => panic!("{d:?}"),
        }
    }
    let (syn, msg) = found.expect("some flow picks fw/0");
    let g = parse(&msg);
    assert_eq!(g.vni, VNI);
    let (chain, hop) = g.chain_hop.expect("marked");
    assert_eq!(hop, 1, "at the first middlebox");
    assert_eq!(
        &msg[g.header_len..],
        &syn[..],
        "the inner frame is untouched"
    );

    // The firewall sends it back with the same header: on to the IPS.
    let mut back = from(fw0, vec![msg.clone()]);
    plan.clear();
    dp.process_udp_batch(&mut back, &mut plan);
    assert_eq!(plan.outs.len(), 1, "{:?}", plan.outs);
    assert_eq!(plan.outs[0].dest, Dest::Udp(inst_addr(11)));
    let m2 = plan.message(&back, &plan.outs[0]);
    let g2 = parse(&m2);
    assert_eq!(g2.chain_hop, Some((chain, 2)));
    assert_eq!(&m2[g2.header_len..], &syn[..]);
    dp.account_sent(&plan.outs, 1);
    let s = dp.stats();
    assert_eq!(s.ports[&10].rx_packets, 1);
    assert_eq!(s.ports[&11].tx_packets, 1);
    assert_eq!(s.ports[&11].tx_bytes, m2.len() as u64);
    assert!(s.ports[&1].rx_packets >= 1);
}

/// The chain clock of a Geneve datagram.
fn clock(d: &[u8]) -> Option<u32> {
    parse_fabric_payload(d).unwrap().clock
}

#[test]
fn the_chain_clock_adds_up_what_each_host_holds_a_packet_without_synchronised_clocks() {
    let mut h1 = Dataplane::new(1, &figure4_host1()).unwrap();
    let t0 = 7_000_000_123;
    h1.set_now(t0);
    ready(&mut h1, &[10, 11, 12]);
    let fw0 = inst_addr(10);
    let mut plan = TxPlan::new();
    // A client flow of east-to-a the hash sends to the local firewall.
    let (syn, to_fw) = (1..=60u8)
        .find_map(|i| {
            let syn = build::tcp_v4(
                [198, 51, 100, i],
                VIP_A,
                40_000 + u16::from(i),
                80,
                1,
                0,
                SYN,
                b"",
            );
            let syn = with_macs(syn, ROUTER_MAC, GW_MAC);
            let batch = frames(vec![syn.clone()]);
            plan.clear();
            h1.process_vm_batch(1, &batch, &mut plan);
            let fw = *plan.outs.last().unwrap();
            (fw.dest == Dest::Udp(fw0)).then(|| (syn, plan.message(&batch, &fw)))
        })
        .expect("some flow picks fw/0");
    // To a local instance the clock goes in its local form: nothing spent yet,
    // less this host's clock.
    assert_eq!(clock(&to_fw), Some(0u32.wrapping_sub(t0 as u32)));
    // fw/0 holds it 40 µs, the IPS 60 µs; each hands the header back as is.
    h1.set_now(t0 + 40_000);
    plan.clear();
    let back = from(fw0, vec![to_fw.clone()]);
    h1.process_udp_batch(&mut back.clone(), &mut plan);
    assert_eq!(plan.outs[0].dest, Dest::Udp(inst_addr(11)));
    let to_ips = plan.message(&back, &plan.outs[0]);
    assert_eq!(clock(&to_ips), clock(&to_fw));
    h1.set_now(t0 + 100_000);
    plan.clear();
    let back = from(inst_addr(11), vec![to_ips]);
    h1.process_udp_batch(&mut back.clone(), &mut plan);
    let host2 = SocketAddrV4::new(underlay(2), GENEVE_PORT);
    assert_eq!(plan.outs.len(), 1, "{:?}", plan.outs);
    assert_eq!(plan.outs[0].dest, Dest::Udp(host2), "on to lb-a");
    let to_h2 = plan.message(&back, &plan.outs[0]);
    // Between hosts: the time spent so far.
    assert_eq!(clock(&to_h2), Some(100_000));
    assert!(
        h1.chain_measures().iter().all(|c| c.latency.count() == 0),
        "nothing ended its chain on host 1"
    );

    // Host 2's clock has nothing to do with host 1's.
    let mut h2 = Dataplane::new(2, &figure4_host(2)).unwrap();
    let t2 = 1_000_000_000_777;
    h2.set_now(t2);
    ready(&mut h2, &[10, 11]);
    plan.clear();
    let arrived = from(SocketAddrV4::new(underlay(1), GENEVE_PORT), vec![to_h2]);
    h2.process_udp_batch(&mut arrived.clone(), &mut plan);
    assert_eq!(plan.outs.len(), 1, "{:?}", plan.outs);
    assert_eq!(plan.outs[0].dest, Dest::Udp(inst_addr(11)), "to lb-a");
    let to_lb = plan.message(&arrived, &plan.outs[0]);
    assert_eq!(clock(&to_lb), Some(100_000u32.wrapping_sub(t2 as u32)));
    // lb-a holds it 25 µs and sends it to web-a1 with the header it came with.
    let g = parse(&to_lb);
    let mut rewritten = to_lb[..g.header_len].to_vec();
    let inner = &syn[14..];
    let web_a1 = build::tcp_v4(
        [inner[12], inner[13], inner[14], inner[15]],
        [10, 10, 1, 11],
        u16::from_be_bytes([inner[20], inner[21]]),
        80,
        1,
        0,
        SYN,
        b"",
    );
    rewritten.extend_from_slice(&with_macs(web_a1, ROUTER_MAC, GW_MAC));
    h2.set_now(t2 + 25_000);
    plan.clear();
    h2.process_udp_batch(&mut from(inst_addr(11), vec![rewritten]), &mut plan);
    assert_eq!(plan.outs.len(), 1, "{:?}", plan.outs);
    assert_eq!(plan.outs[0].dest, Dest::Vm(20), "delivered to web-a1");
    let m = h2.chain_measures();
    let ended: Vec<_> = m.iter().filter(|c| c.latency.count() > 0).collect();
    assert_eq!(ended.len(), 1, "{m:?}");
    assert_eq!(ended[0].chain, g.chain_hop.unwrap().0);
    // 100 µs on host 1 and 25 µs on host 2, in the (100, 250] µs bucket.
    assert_eq!(ended[0].latency.sum_ns, 125_000);
    assert_eq!(ended[0].latency.counts[4], 1);
}

#[test]
fn delivery_to_a_vm_rewrites_macs_and_fabric_is_handled() {
    let mut dp = Dataplane::new(1, &two_vms()).unwrap();
    let mut plan = TxPlan::new();
    let f = with_macs(
        build::udp_v4([10, 0, 0, 1], [10, 0, 0, 2], 1000, 2000, b"hello"),
        ROUTER_MAC,
        [2, 0, 0, 0, 1, 1],
    );
    let batch = frames(vec![f.clone(), f.clone()]);
    dp.process_vm_batch(1, &batch, &mut plan);
    assert_eq!(plan.outs.len(), 2);
    let m = plan.message(&batch, &plan.outs[1]);
    assert_eq!(plan.outs[1].dest, Dest::Vm(2));
    assert_eq!(&m[..6], &[2, 0, 0, 0, 1, 2], "dst = the VM's MAC");
    assert_eq!(&m[6..12], &ROUTER_MAC);
    assert_eq!(&m[12..], &f[12..]);
    assert_eq!(plan.outs[1].frame, 1);
    dp.account_sent(&plan.outs, 1);
    assert_eq!(dp.stats().ports[&2].tx_packets, 1);
    assert_eq!(dp.stats().drops_of(DropReason::SendFail), 1);

    // To a remote prefix: Geneve to host 3, no chain mark.
    plan.clear();
    let far = build::udp_v4([10, 0, 0, 1], [10, 9, 1, 1], 1, 2, b"x");
    let batch = frames(vec![far.clone()]);
    dp.process_vm_batch(1, &batch, &mut plan);
    assert_eq!(
        plan.outs[0].dest,
        Dest::Udp(SocketAddrV4::new(underlay(3), GENEVE_PORT))
    );
    let m = plan.message(&batch, &plan.outs[0]);
    assert_eq!(parse(&m).chain_hop, None);
    assert_eq!(&m[8..], &far[..]);
    // What leaves toward a peer counts as fabric and against that peer
    // (what the controller adds up per rack); a failed send counts neither.
    assert!(dp.stats().peers.is_empty());
    dp.account_sent(&plan.outs, 1);
    let p = dp.stats().peers[&3];
    assert_eq!((p.tx_packets, p.tx_bytes), (1, m.len() as u64));
    assert_eq!(dp.stats().fabric.tx_packets, 1);
    dp.account_sent(&plan.outs, 0);
    assert_eq!(dp.stats().peers[&3].tx_packets, 1);
    let mut sum = dp.stats().clone();
    sum.add(dp.stats());
    assert_eq!(sum.peers[&3].tx_bytes, 2 * m.len() as u64, "shards sum");

    // From the fabric (peer 2) to VM 2.
    plan.clear();
    let mut batch = from(
        SocketAddrV4::new(underlay(2), GENEVE_PORT),
        vec![encap(7, None, &f)],
    );
    dp.process_udp_batch(&mut batch, &mut plan);
    assert_eq!(plan.outs.len(), 1);
    assert_eq!(plan.outs[0].dest, Dest::Vm(2));
    let m = plan.message(&batch, &plan.outs[0]);
    assert_eq!(&m[12..], &f[12..]);
    assert_eq!(dp.stats().fabric.rx_packets, 1);
}

/// Host 1 sends through Seawall to host 3, host 3 counts and reports, and
/// host 1's controller acts on the report: a flooding VM is cut to about
/// what got through and then policed at its own host.
#[test]
fn seawall_numbers_packets_to_other_hosts_and_obeys_their_loss_reports() {
    let ms = 1_000_000u64;
    let mut tx = Dataplane::new(1, &two_vms()).unwrap();
    tx.set_seawall(Some(sluice_seawall::Config {
        max_rate_bps: 1_000_000_000,
        ..sluice_seawall::Config::default()
    }));
    let mut rx_cfg = two_vms();
    rx_cfg.host = 3;
    let mut rx = Dataplane::new(3, &rx_cfg).unwrap();
    assert_eq!(
        sluice_switch::tunnel::OPTION_SEQ,
        sluice_seawall::wire::OPTION_SEQ
    );
    let far = build::udp_v4([10, 0, 0, 1], [10, 9, 1, 1], 1, 2, &[7u8; 1000]);
    let batch = frames(vec![far.clone(); 10]);
    let mut plan = TxPlan::new();
    tx.set_now(ms);
    tx.process_vm_batch(1, &batch, &mut plan);
    assert_eq!(plan.outs.len(), 10);
    // Every datagram carries port 1's next sequence number; the inner
    // frame is untouched.
    let msgs: Vec<Vec<u8>> = plan.outs.iter().map(|o| plan.message(&batch, o)).collect();
    for (k, m) in msgs.iter().enumerate() {
        let p = parse_fabric_payload(m).unwrap();
        let o = p.seq.unwrap();
        assert_eq!((o.port, o.seq, o.sent_us), (1, k as u32, 1000));
        assert_eq!(&m[p.inner_at..], &far[..]);
    }
    // Host 3 gets numbers 0-3 and 6-9: 4 and 5 were lost on the way.
    let got: Vec<Vec<u8>> = msgs
        .iter()
        .enumerate()
        .filter(|(k, _)| *k != 4 && *k != 5)
        .map(|(_, m)| m.clone())
        .collect();
    let mut plan3 = TxPlan::new();
    rx.set_now(ms);
    rx.process_udp_batch(
        &mut from(SocketAddrV4::new(underlay(1), GENEVE_PORT), got),
        &mut plan3,
    );
    assert_eq!(plan3.outs.len(), 0, "no VM on host 3 has 10.9.1.1");
    // The report is due one period later, not before.
    let due = rx.next_deadline().unwrap();
    rx.set_now(due - 1);
    plan3.clear();
    rx.seawall_tick(&mut plan3);
    assert!(plan3.is_empty());
    rx.set_now(due);
    rx.seawall_tick(&mut plan3);
    assert_eq!(plan3.outs.len(), 1);
    assert_eq!(
        plan3.outs[0].dest,
        Dest::Udp(SocketAddrV4::new(underlay(1), GENEVE_PORT))
    );
    let empty: Vec<(Vec<u8>, Option<SocketAddrV4>)> = Vec::new();
    let fb = plan3.message(&empty, &plan3.outs[0]);
    let reports: Vec<_> = sluice_seawall::wire::decode_feedback(&fb)
        .unwrap()
        .collect();
    assert_eq!(reports.len(), 1);
    assert_eq!(
        (reports[0].port, reports[0].received, reports[0].lost),
        (1, 8, 2)
    );
    assert_eq!(rx.stats().seawall_feedback_sent, 1);

    // Host 1 applies it: port 1's rate to host 3 falls below what it sent
    // (10 kB in 1 ms... 80 Mbit/s), far below the 1 Gbit/s it started at.
    tx.set_now(due);
    plan.clear();
    tx.process_udp_batch(
        &mut from(
            SocketAddrV4::new(underlay(3), GENEVE_PORT),
            vec![fb.clone()],
        ),
        &mut plan,
    );
    assert!(plan.is_empty());
    assert_eq!(tx.stats().seawall_feedback_received, 1);
    let ents = tx.seawall_entities();
    assert_eq!(ents.len(), 1);
    let (e, rate, st) = ents[0];
    assert_eq!((e.port, e.host), (1, 3));
    assert!(rate < 100_000_000, "rate {rate}");
    assert_eq!(
        (st.reported_received, st.reported_lost, st.decreases),
        (8, 2, 1)
    );
    // A flood now: what is over the rate waits at host 1 (its queue), the
    // rest of it is dropped there, counted as rate_limited against the
    // sending port.
    let flood = frames(vec![far.clone(); 64]);
    let mut sent = 0;
    for k in 0..20u64 {
        plan.clear();
        tx.set_now(due + k * 10_000);
        tx.process_vm_batch(1, &flood, &mut plan);
        sent += plan.outs.len();
    }
    let policed = tx.stats().drops_of(DropReason::RateLimited);
    let waiting = tx.seawall_entities()[0].2.queue_packets_now;
    assert_eq!(sent as u64 + policed + waiting, 20 * 64);
    assert!(
        policed > 900 && waiting > 100,
        "policed {policed}, waiting {waiting}"
    );
    assert_eq!(tx.stats().ports[&1].drops, policed);
    // The waiting packets leave as their tokens come, from the tick, with
    // headers and numbers as if sent directly.
    let empty: Vec<(Vec<u8>, Option<SocketAddrV4>)> = Vec::new();
    let mut next_seq = 10 + sent as u32;
    let mut left = 0;
    while let Some(d) = tx.next_deadline() {
        plan.clear();
        tx.set_now(d);
        tx.seawall_tick(&mut plan);
        for o in &plan.outs {
            assert_eq!(
                o.dest,
                Dest::Udp(SocketAddrV4::new(underlay(3), GENEVE_PORT))
            );
            let m = plan.message(&empty, o);
            let p = parse_fabric_payload(&m).unwrap();
            let so = p.seq.unwrap();
            assert_eq!(
                (so.port, so.seq, so.sent_us),
                (1, next_seq, (d / 1000) as u32)
            );
            assert_eq!(&m[p.inner_at..], &far[..]);
            next_seq += 1;
            left += 1;
        }
    }
    assert_eq!(left, waiting);
    // Host 3, which reported before, said nothing while they left (over
    // four periods): that silence counts as loss, and the rate was cut
    // again.
    let (_, after, st) = tx.seawall_entities()[0];
    assert!(after < rate && st.decreases >= 2, "{after} {st:?}");
    let rate = after;
    // Local delivery is never rate-controlled.
    plan.clear();
    let near = with_macs(
        build::udp_v4([10, 0, 0, 1], [10, 0, 0, 2], 1, 2, &[1u8; 1000]),
        ROUTER_MAC,
        [2, 0, 0, 0, 1, 1],
    );
    tx.process_vm_batch(1, &frames(vec![near; 64]), &mut plan);
    assert_eq!(plan.outs.len(), 64);
    // A garbled report is counted as malformed and changes nothing.
    let mut bad = fb.clone();
    bad.truncate(bad.len() - 3);
    plan.clear();
    tx.process_udp_batch(
        &mut from(SocketAddrV4::new(underlay(3), GENEVE_PORT), vec![bad]),
        &mut plan,
    );
    assert_eq!(tx.stats().drops_of(DropReason::Malformed), 1);
    assert_eq!(tx.seawall_entities()[0].1, rate);
    // A new configuration keeps the controllers and the numbering.
    let mut next = Dataplane::new(1, &two_vms()).unwrap();
    next.inherit_stats(&tx);
    assert!(next.seawall_on());
    assert_eq!(next.seawall_entities()[0].1, rate);
    // Each VM port's weight reaches the controllers.
    let w = |dp: &Dataplane, port: u16| dp.seawall.sender.as_ref().unwrap().weight(port);
    assert_eq!((w(&next, 1), w(&next, 2)), (1, 2));
}

#[test]
fn chains_entered_at_vms_are_metered_and_handshakes_timed() {
    let mut cfg = two_vms();
    // Traffic to VM 2 is chain 4 (no middlebox): it enters the chain at VM 1.
    cfg.tenants[0].entries[1]
        .actions
        .insert(0, Action::SetChainHop { chain: 4, hop: 1 });
    let mut dp = Dataplane::new(1, &cfg).unwrap();
    let mut plan = TxPlan::new();
    let tcp = |src: [u8; 4], dst: [u8; 4], sp: u16, dp_: u16, flags: u8| {
        with_macs(
            build::tcp_v4(src, dst, sp, dp_, 1, 0, flags, b""),
            ROUTER_MAC,
            [2, 0, 0, 0, 1, src[3]],
        )
    };
    dp.set_now(1_000_000);
    let syn = tcp([10, 0, 0, 1], [10, 0, 0, 2], 5555, 80, SYN);
    dp.process_vm_batch(1, &frames(vec![syn.clone(), syn.clone()]), &mut plan);
    assert_eq!(plan.outs.len(), 2, "both delivered");
    dp.set_now(3_500_000);
    plan.clear();
    let syn_ack = tcp([10, 0, 0, 2], [10, 0, 0, 1], 80, 5555, SYN | 0x10);
    dp.process_vm_batch(2, &frames(vec![syn_ack]), &mut plan);
    assert_eq!(plan.outs.len(), 1);
    let m = dp.chain_measures();
    assert_eq!(m.len(), 1, "the reply is in no chain: {m:?}");
    assert_eq!((m[0].vni, m[0].chain), (7, 4));
    assert_eq!((m[0].packets, m[0].bytes), (2, 2 * syn.len() as u64));
    assert_eq!(m[0].syns, 2);
    assert_eq!((m[0].handshakes, m[0].handshake_ns), (1, 2_500_000));
    // A new configuration keeps the counters.
    let mut next = Dataplane::new(1, &cfg).unwrap();
    next.inherit_stats(&dp);
    assert_eq!(next.chain_measures()[0].handshakes, 1);
}

#[test]
fn arp_requests_are_answered_from_the_router_mac() {
    let mut dp = Dataplane::new(1, &two_vms()).unwrap();
    let mut plan = TxPlan::new();
    let vm_mac = [2, 0, 0, 0, 1, 1];
    let mut req = vec![0xff; 6];
    req.extend_from_slice(&vm_mac);
    req.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    req.extend_from_slice(&vm_mac);
    req.extend_from_slice(&[10, 0, 0, 1]);
    req.extend_from_slice(&[0; 6]);
    req.extend_from_slice(&[169, 254, 0, 1]);
    let batch = frames(vec![req.clone()]);
    dp.process_vm_batch(1, &batch, &mut plan);
    assert_eq!(plan.outs.len(), 1);
    assert_eq!(plan.outs[0].dest, Dest::Vm(1));
    let r = plan.message(&batch, &plan.outs[0]);
    assert_eq!(r.len(), 42);
    assert_eq!(&r[..6], &vm_mac);
    assert_eq!(&r[6..12], &ROUTER_MAC);
    assert_eq!(&r[20..22], &[0, 2], "a reply");
    assert_eq!(&r[22..28], &ROUTER_MAC);
    assert_eq!(&r[28..32], &[169, 254, 0, 1]);
    assert_eq!(&r[32..38], &vm_mac);
    assert_eq!(&r[38..42], &[10, 0, 0, 1]);
    // A reply, a truncated request and a non-IPv4 request get nothing.
    let mut reply = req.clone();
    reply[21] = 2;
    let mut short = req.clone();
    short.truncate(30);
    let mut v6 = req.clone();
    v6[16] = 0x86;
    plan.clear();
    dp.process_vm_batch(1, &frames(vec![reply, short, v6]), &mut plan);
    assert!(plan.outs.is_empty());
    assert_eq!(dp.stats().drops_of(DropReason::Malformed), 2);
}

#[test]
fn garbage_is_counted_and_dropped() {
    let mut dp = Dataplane::new(1, &two_vms()).unwrap();
    let mut plan = TxPlan::new();
    let good = build::udp_v4([10, 0, 0, 1], [10, 0, 0, 2], 1, 2, b"x");
    let mut bad_ip = good.clone();
    bad_ip[14] = 0x47; // IPv4 with a header length past the frame
    let batch = frames(vec![
        vec![],
        vec![1, 2, 3],
        bad_ip,
        build::udp_v4([10, 0, 0, 1], [192, 0, 2, 1], 1, 2, b"nowhere"),
    ]);
    dp.process_vm_batch(1, &batch, &mut plan);
    assert!(plan.outs.is_empty());
    let s = dp.stats();
    assert_eq!(s.drops_of(DropReason::Malformed), 3);
    assert_eq!(s.drops_of(DropReason::NoMatch), 1);
    assert_eq!(s.ports[&1].drops, 4);
    assert_eq!(s.ports[&1].rx_packets, 4);

    let peer = SocketAddrV4::new(underlay(2), GENEVE_PORT);
    let stranger = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 9), GENEVE_PORT);
    let mut critical = encap(7, None, &good);
    critical[0] = 1;
    critical[1] = 0x40;
    critical.splice(8..8, [0x01, 0x01, 0x80, 0x00]);
    let mut batch = vec![
        (vec![0u8; 3], Some(peer)),
        (encap(7, None, &good), Some(stranger)),
        (encap(7, None, &good), None),
        (critical, Some(peer)),
        (encap(99, None, &good), Some(peer)),
        (encap(7, None, &[0u8; 5]), Some(peer)),
    ];
    plan.clear();
    dp.process_udp_batch(&mut batch, &mut plan);
    assert!(plan.outs.is_empty());
    let s = dp.stats();
    assert_eq!(s.drops_of(DropReason::UnknownSource), 2);
    assert_eq!(s.drops_of(DropReason::Malformed), 3 + 3);
    assert_eq!(s.drops_of(DropReason::NoMatch), 1);
    assert_eq!(
        s.drops_of(DropReason::PeerVni),
        1,
        "vni 99 has nothing here: no peer may send it"
    );
    assert_eq!(s.fabric.rx_packets, 6);
    assert_eq!(s.fabric.drops, 6);
    // Frames from a port that left the config.
    dp.process_vm_batch(9, &frames(vec![good]), &mut plan);
    assert!(plan.outs.is_empty());
}

#[test]
fn instances_may_not_speak_for_other_tenants() {
    let mut dp = Dataplane::new(1, &figure4_host1()).unwrap();
    let mut plan = TxPlan::new();
    let f = build::tcp_v4([198, 51, 100, 1], VIP_A, 1, 80, 1, 0, SYN, b"");
    let mut batch = from(inst_addr(10), vec![encap(43, Some((0, 1)), &f)]);
    dp.process_udp_batch(&mut batch, &mut plan);
    assert!(plan.outs.is_empty());
    assert_eq!(dp.stats().drops_of(DropReason::WrongVni), 1);
}

/// [`two_vms`] (tenant 7 from peer 2 only) plus tenant 8's VM on port 3 that
/// no peer may send to (`senders` of tenant 8 as given).
fn two_tenants(senders_of_8: Option<Vec<u32>>) -> AgentConfig {
    let mut c = two_vms();
    c.tenants[0].senders = Some(vec![2]);
    c.ports.push(PortConfig {
        id: 3,
        vni: 8,
        kind: PortKind::Vm {
            name: "other".into(),
            iface: "p3".into(),
            mac: "02:00:00:00:01:03".into(),
            weight: 1,
        },
    });
    c.tenants.push(TenantFib {
        tenant: "u".into(),
        vni: 8,
        entries: vec![Entry {
            id: 1,
            priority: 10,
            m: Match {
                dst: Some(Prefix::parse("10.0.0.3/32").unwrap()),
                ..Match::default()
            },
            actions: vec![Action::Output(Output::Port(PortId(3)))],
        }],
        groups: vec![],
        senders: senders_of_8,
        sources: None,
        chains: Vec::new(),
    });
    c
}

#[test]
fn peers_send_only_for_tenants_that_have_something_on_them() {
    // Host 1 lists itself and a host that is no peer: both are ignored.
    let mut dp = Dataplane::new(1, &two_tenants(Some(vec![1, 9]))).unwrap();
    let mut plan = TxPlan::new();
    let to_vm2 = build::udp_v4([10, 0, 0, 1], [10, 0, 0, 2], 1, 2, b"x");
    let to_other = build::udp_v4([10, 0, 0, 1], [10, 0, 0, 3], 1, 2, b"x");
    let (peer2, peer3) = (
        SocketAddrV4::new(underlay(2), GENEVE_PORT),
        SocketAddrV4::new(underlay(3), GENEVE_PORT),
    );
    let stranger = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 9), GENEVE_PORT);

    // Peer 2 hosts tenant 7: its packet is delivered.
    dp.process_udp_batch(&mut from(peer2, vec![encap(7, None, &to_vm2)]), &mut plan);
    assert_eq!(plan.outs.len(), 1);
    assert_eq!(plan.outs[0].dest, Dest::Vm(2));

    // Tenant 8 from peer 2, tenant 7 from peer 3 (a registered host without
    // it), tenant 7 from no host at all: nothing is sent, each is counted.
    plan.clear();
    let mut batch = vec![
        (encap(8, None, &to_other), Some(peer2)),
        (encap(7, None, &to_vm2), Some(peer3)),
        (encap(8, Some((3, 1)), &to_other), Some(peer3)),
        (encap(7, None, &to_vm2), Some(stranger)),
    ];
    dp.process_udp_batch(&mut batch, &mut plan);
    assert!(plan.outs.is_empty(), "{:?}", plan.outs);
    let s = dp.stats();
    assert_eq!(s.drops_of(DropReason::PeerVni), 3);
    assert_eq!(s.drops_of(DropReason::UnknownSource), 1);
    assert_eq!(s.fabric.rx_packets, 5);
    assert_eq!(s.fabric.drops, 4);
    assert_eq!(s.ports[&3].tx_packets, 0);

    // The same packets are forwarded once the tenant lives on the peer: the
    // drops were the check's, not the FIB's.
    let mut dp = Dataplane::new(1, &two_tenants(Some(vec![2, 3]))).unwrap();
    plan.clear();
    dp.process_udp_batch(&mut batch[..3], &mut plan);
    let dests: Vec<Dest> = plan.outs.iter().map(|o| o.dest).collect();
    assert_eq!(
        dests,
        vec![Dest::Vm(3), Dest::Vm(3)],
        "peer 3's tenant 7 stays out"
    );
    assert_eq!(dp.stats().drops_of(DropReason::PeerVni), 1);
}

#[test]
fn a_tenant_without_senders_accepts_every_peer() {
    // A configuration from before `senders`: tenant 8 from any peer.
    let mut dp = Dataplane::new(1, &two_tenants(None)).unwrap();
    let mut plan = TxPlan::new();
    let to_other = build::udp_v4([10, 0, 0, 1], [10, 0, 0, 3], 1, 2, b"x");
    for h in [2, 3] {
        let peer = SocketAddrV4::new(underlay(h), GENEVE_PORT);
        dp.process_udp_batch(&mut from(peer, vec![encap(8, None, &to_other)]), &mut plan);
    }
    assert_eq!(plan.outs.len(), 2);
    assert!(plan.outs.iter().all(|o| o.dest == Dest::Vm(3)));
    // A stranger is still a stranger.
    let stranger = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 9), GENEVE_PORT);
    dp.process_udp_batch(
        &mut from(stranger, vec![encap(8, None, &to_other)]),
        &mut plan,
    );
    assert_eq!(plan.outs.len(), 2);
    assert_eq!(dp.stats().drops_of(DropReason::UnknownSource), 1);
    assert_eq!(dp.stats().drops_of(DropReason::PeerVni), 0);
}

#[test]
fn bad_configs_are_refused_whole() {
    let good = two_vms();
    assert!(Dataplane::new(1, &good).is_ok());
    assert_eq!(
        Dataplane::new(2, &good).unwrap_err(),
        ConfigError::WrongHost { got: 1, want: 2 }
    );
    let mut c = good.clone();
    c.tenants[0].entries[0].actions = vec![Action::Select(GroupId(9))];
    assert!(matches!(
        Dataplane::new(1, &c),
        Err(ConfigError::Fib { .. })
    ));
    let mut c = good.clone();
    c.ports[1].id = 1;
    assert_eq!(
        Dataplane::new(1, &c).unwrap_err(),
        ConfigError::DuplicatePort(1)
    );
    let mut c = good.clone();
    if let PortKind::Vm { mac, .. } = &mut c.ports[0].kind {
        *mac = "02:00:zz:00:00:01".into();
    }
    assert!(matches!(
        Dataplane::new(1, &c),
        Err(ConfigError::BadMac { .. })
    ));
    let mut c = good.clone();
    if let PortKind::Vm { iface, .. } = &mut c.ports[0].kind {
        *iface = "a-very-long-interface-name".into();
    }
    assert!(matches!(
        Dataplane::new(1, &c),
        Err(ConfigError::BadIface { .. })
    ));
    let mut c = good;
    c.ports.push(PortConfig {
        id: 0,
        vni: 7,
        kind: PortKind::Instance { name: "x".into() },
    });
    assert_eq!(
        Dataplane::new(1, &c).unwrap_err(),
        ConfigError::NoInstanceLink(0)
    );
}

#[test]
fn counters_survive_a_new_config() {
    let mut dp = Dataplane::new(1, &two_vms()).unwrap();
    let mut plan = TxPlan::new();
    let f = build::udp_v4([10, 0, 0, 1], [10, 0, 0, 2], 1, 2, b"x");
    dp.process_vm_batch(1, &frames(vec![f]), &mut plan);
    let mut next = Dataplane::new(1, &two_vms()).unwrap();
    next.inherit_stats(&dp);
    assert_eq!(next.stats().ports[&1].rx_packets, 1);
}

pub(super) fn heartbeat_from(port: u16) -> Vec<(Vec<u8>, Option<SocketAddrV4>)> {
    let hb = InstanceHeartbeat {
        seq: 1,
        rx_packets: 5,
        ..InstanceHeartbeat::default()
    };
    from(inst_addr(port), vec![hb.encode().to_vec()])
}

/// The destination of a client SYN from 198.51.100.`i` on the gateway port
/// (the firewall copy; the monitor's copy comes first).
fn fw_dest(dp: &mut Dataplane, i: u8) -> Option<Dest> {
    let syn = with_macs(
        build::tcp_v4(
            [198, 51, 100, i],
            VIP_A,
            40_000 + i as u16,
            80,
            1,
            0,
            SYN,
            b"",
        ),
        ROUTER_MAC,
        GW_MAC,
    );
    let mut plan = TxPlan::new();
    dp.process_vm_batch(1, &frames(vec![syn]), &mut plan);
    plan.outs
        .iter()
        .map(|o| o.dest)
        .find(|d| *d != Dest::Udp(inst_addr(12)))
}

/// A restarted agent adopts its previous life's instances (instances.rs):
/// its fresh data plane has never heard from them, and their first heartbeat
/// is one from a long-lived process (a high sequence number, counters long
/// past zero). They are taken as ready at once, never as failed: no
/// suspicion, no failover, before or after.
#[test]
fn an_adopted_instance_is_taken_back_without_a_failover() {
    let mut dp = Dataplane::new(1, &figure4_host1()).unwrap();
    let ms = 1_000_000u64;
    // The data plane's clock starts late, as a restarted agent's does.
    dp.set_now(5_000_000 * ms);
    assert!(
        !dp.check_health(5_000_000 * ms, || 5_000_000 * ms),
        "never heard from: starting, not suspected"
    );
    let mut plan = TxPlan::new();
    for k in 0..20u64 {
        let now = 5_000_001 * ms + k * 10 * ms;
        dp.set_now(now);
        for port in [10, 11, 12] {
            let hb = InstanceHeartbeat {
                seq: 90_000 + k as u32,
                rx_packets: 4_000_000,
                tx_packets: 3_900_000,
                cpu_us: 600_000_000,
                ..InstanceHeartbeat::default()
            };
            dp.process_udp_batch(
                &mut from(inst_addr(port), vec![hb.encode().to_vec()]),
                &mut plan,
            );
        }
        assert!(!dp.check_health(now + ms, || now + ms));
        if k == 0 {
            let dests: Vec<Option<Dest>> = (1..=30).map(|i| fw_dest(&mut dp, i)).collect();
            assert!(
                dests.contains(&Some(Dest::Udp(inst_addr(10)))),
                "new flows reach it after its first heartbeat"
            );
        }
    }
    assert!([10, 11, 12].iter().all(|p| !dp.suspected(*p)));
    assert!(
        dp.failover_events().is_empty(),
        "{:?}",
        dp.failover_events()
    );
    assert_eq!(dp.stats().failovers, 0);
}

#[test]
fn a_silent_instance_is_failed_over_and_rejoins() {
    let mut dp = Dataplane::new(1, &figure4_host1()).unwrap();
    // The mechanism at a 30 ms floor (the default is 150 ms).
    dp.set_suspect_after(30_000_000);
    let ms = 1_000_000u64;
    dp.set_now(990 * ms);
    ready(&mut dp, &[10, 11, 12]);
    let host2 = Dest::Udp(SocketAddrV4::new(underlay(2), GENEVE_PORT));
    let before: Vec<Option<Dest>> = (1..=60).map(|i| fw_dest(&mut dp, i)).collect();
    assert!(before.contains(&Some(Dest::Udp(inst_addr(10)))));
    assert!(before.contains(&Some(host2)));
    // Heartbeats, then silence past the timeout.
    dp.set_now(1000 * ms);
    let mut plan = TxPlan::new();
    dp.process_udp_batch(&mut heartbeat_from(10), &mut plan);
    assert!(plan.outs.is_empty(), "heartbeats are not forwarded");
    assert_eq!(dp.stats().heartbeats, 4);
    assert_eq!(dp.next_deadline(), Some(1020 * ms), "ports 11 and 12");
    dp.set_now(1015 * ms);
    ready(&mut dp, &[11, 12]);
    assert_eq!(dp.next_deadline(), Some(1030 * ms));
    assert!(!dp.check_health(1020 * ms, || 1020 * ms));
    assert!(dp.check_health(1031 * ms, || 1031 * ms + 5_000));
    assert!(dp.suspected(10));
    let e = &dp.failover_events()[0];
    assert_eq!(e.port, 10);
    assert_eq!(e.suspected_at_us, 1_030_000);
    assert_eq!(e.applied_at_us, 1_031_005);
    assert_eq!(e.groups, 1);
    // The firewall's traffic now goes to host 2; nothing else moved.
    for (i, b) in (1..=60).zip(&before) {
        assert_eq!(fw_dest(&mut dp, i), Some(host2), "flow {i} (was {b:?})");
    }
    // From the fabric, a packet for the firewall has no local instance left.
    let f = build::tcp_v4([198, 51, 100, 1], VIP_A, 1, 80, 1, 0, SYN, b"");
    let peer = SocketAddrV4::new(underlay(2), GENEVE_PORT);
    let (chain, _) = {
        let mut p = TxPlan::new();
        let mut d2 = Dataplane::new(1, &figure4_host1()).unwrap();
        let batch = frames(vec![with_macs(f.clone(), ROUTER_MAC, GW_MAC)]);
        d2.process_vm_batch(1, &batch, &mut p);
        parse(&p.message(&batch, p.outs.last().unwrap()))
            .chain_hop
            .unwrap()
    };
    plan.clear();
    dp.process_udp_batch(
        &mut from(peer, vec![encap(VNI, Some((chain, 1)), &f)]),
        &mut plan,
    );
    assert!(
        plan.outs.iter().all(|o| o.dest != host2),
        "never bounced back"
    );
    assert_eq!(dp.stats().drops_of(DropReason::NoLiveInstance), 1);
    // An exit noticed after the timeout changes nothing more.
    assert!(!dp.instance_exited(10, 1040 * ms, || 1040 * ms));
    assert!(dp.instance_exited(11, 1040 * ms, || 1040 * ms));
    assert_eq!(dp.failover_events()[1].reason, "exited");
    dp.set_now(1041 * ms);
    ready(&mut dp, &[11]);
    assert!(!dp.suspected(11));
    // A new configuration keeps the suspicion.
    let mut next = Dataplane::new(1, &figure4_host1()).unwrap();
    next.inherit_stats(&dp);
    assert!(next.suspected(10));
    assert_eq!(fw_dest(&mut next, 1), Some(host2));
    // Heartbeats resume: it rejoins and gets its flows back.
    next.set_now(1200 * ms);
    plan.clear();
    next.process_udp_batch(&mut heartbeat_from(10), &mut plan);
    assert!(!next.suspected(10));
    assert_eq!(next.failover_events()[0].rejoined_at_us, Some(1_200_000));
    assert_eq!(
        next.failover_events()[0].silence_us,
        Some(200_000),
        "silent from its last heartbeat at 1,000 ms"
    );
    for (i, b) in (1..=60).zip(&before) {
        assert_eq!(fw_dest(&mut next, i), *b);
    }
    let h = next.health_report();
    let fw = h.iter().find(|h| h.port == 10).unwrap();
    assert_eq!(
        (fw.rx_packets, fw.suspected, fw.last_heartbeat_age_ms),
        (5, false, Some(0))
    );
}

/// Firewall instances on ports 5 and 6 (with these weights) in group 1,
/// selected by the client VM on port 1, with the group's policy.
fn fw_group(
    weights: &[(u16, u32)],
    draining: Vec<u16>,
    pinned: bool,
    local_state: bool,
) -> AgentConfig {
    let mut c = two_vms();
    let targets: Vec<(Output, u32)> = weights
        .iter()
        .map(|&(p, w)| (Output::Port(PortId(p)), w))
        .collect();
    c.tenants[0].groups = vec![(1, sluice_switch::Group::split(&targets).unwrap())];
    c.tenants[0].entries.insert(
        0,
        Entry {
            id: 9,
            priority: 100,
            m: Match {
                in_port: Some(PortId(1)),
                ..Match::default()
            },
            actions: vec![Action::Select(GroupId(1))],
        },
    );
    for p in [5u16, 6] {
        c.ports.push(PortConfig {
            id: p,
            vni: 7,
            kind: PortKind::Instance {
                name: format!("t/fw/{p}"),
            },
        });
    }
    c.group_policies = vec![sluice_proto::GroupPolicy {
        vni: 7,
        group: 1,
        pinned,
        draining: draining
            .into_iter()
            .map(|p| Output::Port(PortId(p)))
            .collect(),
        local_state,
        cached: false,
        lease_epoch: 0,
    }];
    c
}

/// The lease answers in `plan`, by destination.
fn leases_in(plan: &TxPlan) -> Vec<(Dest, sluice_proto::InstanceLease)> {
    plan.outs
        .iter()
        .filter_map(|o| sluice_proto::InstanceLease::decode(plan.head(o)).map(|l| (o.dest, l)))
        .collect()
}

#[test]
fn instances_of_a_leased_group_get_leases_on_exactly_their_ranges() {
    let ms = 1_000_000u64;
    let mut c = fw_group(&[(5, 1), (6, 3)], vec![], false, false);
    c.group_policies[0].lease_epoch = 77;
    let mut dp = Dataplane::new(1, &c).unwrap();
    // The mechanism at a 30 ms floor (the default is 150 ms).
    dp.set_suspect_after(30_000_000);
    let g = c.tenants[0].groups[0].1.clone();
    let want5 = vec![(0u32, (g.ranges[0].0 - 1) as u32)];
    let want6 = vec![(g.ranges[0].0 as u32, u32::MAX)];
    let beat = |dp: &mut Dataplane, now: u64, ports: &[u16]| {
        dp.set_now(now);
        let mut plan = TxPlan::new();
        for p in ports {
            dp.process_udp_batch(&mut heartbeat_from(*p), &mut plan);
        }
        leases_in(&plan)
    };
    // The controller has not been heard from: nothing.
    assert!(beat(&mut dp, 1000 * ms, &[5, 6]).is_empty());
    dp.allow_leases_until(5000 * ms);
    // Conditions hold from now; leases only after the drain time.
    assert!(beat(&mut dp, 1001 * ms, &[5, 6]).is_empty());
    assert!(beat(&mut dp, 1040 * ms, &[5, 6]).is_empty());
    let got = beat(&mut dp, 1001 * ms + LEASE_DRAIN_NS, &[5, 6]);
    assert_eq!(got.len(), 2);
    for (dest, l) in &got {
        let want = if *dest == Dest::Udp(inst_addr(5)) {
            &want5
        } else {
            &want6
        };
        assert_eq!(&l.ranges, want, "{dest:?}");
        assert_eq!((l.epoch, l.hb_seq), (77, 1));
        assert!(
            u64::from(l.valid_us) * 1000 < DEFAULT_SUSPECT_NS,
            "ends before suspicion"
        );
    }
    assert_eq!(dp.stats().leases, 2);
    // Port 5 falls silent and is suspected: its range moves to port 6, which
    // keeps exactly its own lease (the moved flows go to the store).
    let t = 1001 * ms + LEASE_DRAIN_NS;
    assert!(beat(&mut dp, t + 20 * ms, &[6]).len() == 1);
    assert!(dp.check_health(t + 40 * ms, || t + 40 * ms));
    let got = beat(&mut dp, t + 41 * ms, &[6]);
    assert_eq!(
        got,
        vec![(
            Dest::Udp(inst_addr(6)),
            sluice_proto::InstanceLease {
                epoch: 77,
                hb_seq: 1,
                valid_us: (LEASE_VALID_NS / 1000) as u32,
                ranges: want6.clone(),
            }
        )]
    );
    // Port 5 comes back: no lease until its flows sent elsewhere drained
    // (told its old one is over, in case it still counts on it).
    let got = beat(&mut dp, t + 50 * ms, &[5]);
    assert!(got.iter().all(|(_, l)| l.epoch == 0), "{got:?}");
    assert!(beat(&mut dp, t + 60 * ms, &[5]).is_empty());
    assert_eq!(beat(&mut dp, t + 50 * ms + LEASE_DRAIN_NS, &[5]).len(), 1);
    // The controller revokes (epoch 0): holders are told at their next beat.
    c.group_policies[0].lease_epoch = 0;
    let mut next = Dataplane::new(1, &c).unwrap();
    next.inherit_stats(&dp);
    let got = beat(&mut next, t + 200 * ms, &[5, 6]);
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|(_, l)| l.epoch == 0 && l.ranges.is_empty()));
    assert_eq!(
        next.stats().lease_revocations,
        3,
        "port 5 was told once before"
    );
    assert!(
        beat(&mut next, t + 210 * ms, &[5, 6]).is_empty(),
        "told once"
    );
    // A new epoch is granted after the drain time; silence from the
    // controller past its grace stops grants.
    c.group_policies[0].lease_epoch = 78;
    let mut again = Dataplane::new(1, &c).unwrap();
    again.inherit_stats(&next);
    assert!(beat(&mut again, t + 300 * ms, &[5, 6]).is_empty());
    assert_eq!(
        beat(&mut again, t + 300 * ms + LEASE_DRAIN_NS, &[5, 6]).len(),
        2
    );
    let got = beat(&mut again, 5001 * ms, &[5, 6]);
    assert!(got.iter().all(|(_, l)| l.epoch == 0), "revoked: {got:?}");
    // Pinned or local-state groups never lease.
    for (pinned, local) in [(true, false), (false, true)] {
        let mut c = fw_group(&[(5, 1), (6, 1)], vec![], pinned, local);
        c.group_policies[0].lease_epoch = 9;
        let mut dp = Dataplane::new(1, &c).unwrap();
        dp.allow_leases_until(u64::MAX);
        assert!(beat(&mut dp, 1000 * ms, &[5, 6]).is_empty());
        assert!(beat(&mut dp, 1000 * ms + LEASE_DRAIN_NS, &[5, 6]).is_empty());
    }
}

#[test]
fn local_state_groups_fail_over_an_exited_instance_but_not_a_silent_one() {
    let ms = 1_000_000u64;
    let dest = |dp: &mut Dataplane, i: u16| {
        let f = build::tcp_v4([10, 0, 0, 1], [10, 0, 9, 9], 1000 + i, 80, 1, 0, SYN, b"");
        let mut plan = TxPlan::new();
        dp.process_vm_batch(1, &frames(vec![f]), &mut plan);
        plan.outs[0].dest
    };
    let (p5, p6) = (Dest::Udp(inst_addr(5)), Dest::Udp(inst_addr(6)));
    for (pinned, local) in [(true, true), (false, true), (false, false)] {
        let mut dp =
            Dataplane::new(1, &fw_group(&[(5, 1), (6, 1)], vec![], pinned, local)).unwrap();
        // The mechanism at a 30 ms floor (the default is 150 ms).
        dp.set_suspect_after(30_000_000);
        dp.set_now(1000 * ms);
        ready(&mut dp, &[5, 6]);
        let before: Vec<Dest> = (0..100).map(|i| dest(&mut dp, i)).collect();
        assert!(before.contains(&p5) && before.contains(&p6));
        // Port 5 falls silent past the suspicion timeout; 6 keeps talking.
        dp.set_now(1040 * ms);
        ready(&mut dp, &[6]);
        dp.check_health(1041 * ms, || 1041 * ms);
        assert!(dp.suspected(5));
        let silent: Vec<Dest> = (0..100).map(|i| dest(&mut dp, i)).collect();
        if local {
            assert_eq!(
                silent, before,
                "pinned={pinned}: a slow local-state instance keeps its flows"
            );
        } else {
            assert!(silent.iter().all(|d| *d == p6), "shared state fails over");
        }
        // Its process exits: now its flows go to the survivor.
        dp.instance_exited(5, 1050 * ms, || 1050 * ms);
        assert!((0..100).all(|i| dest(&mut dp, i) == p6), "pinned={pinned}");
        // It is restarted and heartbeats again: new flows may use it.
        dp.set_now(1060 * ms);
        ready(&mut dp, &[5, 6]);
        assert!(!dp.suspected(5));
        let later: Vec<Dest> = (100..300).map(|i| dest(&mut dp, i)).collect();
        assert!(later.contains(&p5), "pinned={pinned}");
    }
}

#[test]
fn pinned_groups_keep_flows_across_a_new_split() {
    // Two local firewall instances (ports 5 and 6), pinned; the client VM on
    // port 1 selects among them.
    let cfg = |weights: &[(u16, u32)], draining: Vec<u16>| fw_group(weights, draining, true, true);
    let dest = |dp: &mut Dataplane, i: u16| {
        let f = build::tcp_v4([10, 0, 0, 1], [10, 0, 9, 9], 1000 + i, 80, 1, 0, SYN, b"");
        let mut plan = TxPlan::new();
        dp.process_vm_batch(1, &frames(vec![f]), &mut plan);
        plan.outs[0].dest
    };
    let (p5, p6) = (Dest::Udp(inst_addr(5)), Dest::Udp(inst_addr(6)));
    let mut dp = Dataplane::new(1, &cfg(&[(5, 1)], vec![])).unwrap();
    for i in 0..100 {
        assert_eq!(dest(&mut dp, i), p5);
    }
    // Scale out: old flows stay on 5, new ones split.
    let mut next = Dataplane::new(1, &cfg(&[(5, 1), (6, 1)], vec![])).unwrap();
    next.inherit_stats(&dp);
    for i in 0..100 {
        assert_eq!(dest(&mut next, i), p5);
    }
    let new: Vec<Dest> = (100..300).map(|i| dest(&mut next, i)).collect();
    assert!(new.contains(&p6) && new.contains(&p5));
    // Drain 5: no new flows, its own stay; status counts them.
    let mut drain = Dataplane::new(1, &cfg(&[(6, 1)], vec![5])).unwrap();
    drain.inherit_stats(&next);
    for i in 0..100 {
        assert_eq!(dest(&mut drain, i), p5);
    }
    for i in 300..400 {
        assert_eq!(dest(&mut drain, i), p6);
    }
    let pins = drain.pinned_flows();
    let on5 = pins
        .iter()
        .find(|p| p.target == Output::Port(PortId(5)))
        .unwrap();
    assert!(on5.draining);
    let n5 = new.iter().filter(|d| **d == p5).count() as u64;
    assert_eq!(on5.flows, 100 + n5);
}

#[test]
fn macs_parse() {
    assert_eq!(parse_mac("02:53:4c:00:00:01"), Some(ROUTER_MAC));
    assert_eq!(parse_mac("02:53:4c:00:00"), None);
    assert_eq!(parse_mac("02:53:4c:00:00:01:02"), None);
    assert_eq!(parse_mac("02:53:4c:00:00:1ff"), None);
    assert!(valid_iface("sl4711h1p12"));
    assert!(!valid_iface("a/b") && !valid_iface("") && !valid_iface("0123456789abcdef"));
}

/// A jumbo frame (MTU 9000) and a 60 KiB offloaded segment cross every kind of
/// hop whole: into a chain as Geneve, back from the instance to the next hop,
/// to a remote host, and from the fabric into a VM.
#[test]
fn jumbo_and_offloaded_frames_are_encapsulated_and_decapsulated_whole() {
    use sluice_wire::tcp::flags::ACK;
    for payload in [9000 - 40, 60 * 1024] {
        let body: Vec<u8> = (0..payload).map(|i| (i % 251) as u8).collect();
        let mut dp = Dataplane::new(1, &figure4_host1()).unwrap();
        ready(&mut dp, &[10, 11, 12]);
        let mut plan = TxPlan::new();
        let fw0 = inst_addr(10);
        let mut found = None;
        for i in 1..=60u8 {
            let f = with_macs(
                build::tcp_v4(
                    [198, 51, 100, i],
                    VIP_A,
                    40_000 + i as u16,
                    80,
                    1,
                    1,
                    ACK,
                    &body,
                ),
                ROUTER_MAC,
                GW_MAC,
            );
            let batch = frames(vec![f.clone()]);
            plan.clear();
            dp.process_vm_batch(1, &batch, &mut plan);
            let fw = *plan.outs.last().expect("forwarded");
            if fw.dest == Dest::Udp(fw0) {
                found = Some((f, plan.message(&batch, &fw)));
                break;
            }
        }
        let (f, msg) = found.expect("some flow picks fw/0");
        let g = parse(&msg);
        assert_eq!(g.chain_hop.map(|c| c.1), Some(1));
        assert!(msg[g.header_len..] == f[..], "{payload}: inner frame whole");
        let mut back = from(fw0, vec![msg.clone()]);
        plan.clear();
        dp.process_udp_batch(&mut back, &mut plan);
        assert_eq!(plan.outs.len(), 1, "{:?}", plan.outs);
        let m2 = plan.message(&back, &plan.outs[0]);
        let g2 = parse(&m2);
        assert_eq!(g2.chain_hop.map(|c| c.1), Some(2));
        assert!(m2[g2.header_len..] == f[..], "{payload}: next hop whole");

        // Between VMs, to a remote host, and from the fabric.
        let mut dp = Dataplane::new(1, &two_vms()).unwrap();
        let v = with_macs(
            build::udp_v4([10, 0, 0, 1], [10, 0, 0, 2], 1000, 2000, &body),
            ROUTER_MAC,
            [2, 0, 0, 0, 1, 1],
        );
        let far = build::udp_v4([10, 0, 0, 1], [10, 9, 1, 1], 1, 2, &body);
        let batch = frames(vec![v.clone(), far.clone()]);
        plan.clear();
        dp.process_vm_batch(1, &batch, &mut plan);
        assert_eq!(plan.outs.len(), 2, "{:?}", plan.outs);
        let m = plan.message(&batch, &plan.outs[0]);
        assert_eq!(plan.outs[0].dest, Dest::Vm(2));
        assert!(m[12..] == v[12..]);
        let m = plan.message(&batch, &plan.outs[1]);
        assert_eq!(
            plan.outs[1].dest,
            Dest::Udp(SocketAddrV4::new(underlay(3), GENEVE_PORT))
        );
        assert!(
            m[parse(&m).header_len..] == far[..],
            "{payload}: to host 3 whole"
        );
        let mut batch = from(
            SocketAddrV4::new(underlay(2), GENEVE_PORT),
            vec![encap(7, None, &v)],
        );
        plan.clear();
        dp.process_udp_batch(&mut batch, &mut plan);
        assert_eq!(plan.outs.len(), 1);
        assert_eq!(plan.outs[0].dest, Dest::Vm(2));
        let m = plan.message(&batch, &plan.outs[0]);
        assert!(m[12..] == v[12..], "{payload}: from the fabric whole");
        assert_eq!(dp.stats().fabric.rx_packets, 1);
    }
}

/// Keys of host `me` for its peers: the key of (from, to) is `from * 16 + to`
/// repeated, so both ends of a link derive the same one.
pub(super) fn fabric_keys(me: u32, peers: &[u32]) -> sluice_proto::FabricAuth {
    let k = |from: u32, to: u32| sluice_proto::FabricKey {
        id: 1,
        key: format!("{:02x}", from * 16 + to).repeat(32),
    };
    sluice_proto::FabricAuth {
        peers: peers
            .iter()
            .map(|&p| sluice_proto::PeerKeys {
                host: p,
                tx: k(me, p),
                rx: vec![k(p, me)],
            })
            .collect(),
    }
}

/// Seawall's feedback is sealed like data: host 3's loss report reaches host
/// 1 authenticated, not in clear, and cuts its rate; a report forged in clear
/// from host 3's address (as a host spoofing its underlay address would send)
/// and a replay of the sealed one are dropped and change nothing.
#[test]
fn sealed_seawall_feedback_acts_and_forged_or_replayed_feedback_does_not() {
    let ms = 1_000_000u64;
    let mut c1 = two_vms();
    c1.fabric_auth = Some(fabric_keys(1, &[2, 3]));
    let mut tx = Dataplane::new(1, &c1).unwrap();
    tx.set_seawall(Some(sluice_seawall::Config {
        max_rate_bps: 1_000_000_000,
        ..sluice_seawall::Config::default()
    }));
    let mut c3 = two_vms();
    c3.host = 3;
    c3.fabric_auth = Some(fabric_keys(3, &[1, 2]));
    let mut rx = Dataplane::new(3, &c3).unwrap();
    let from1 = SocketAddrV4::new(underlay(1), GENEVE_PORT);
    let from3 = SocketAddrV4::new(underlay(3), GENEVE_PORT);

    // A forged report first: everything lost, in clear, from host 3's address.
    let mut forged = Vec::new();
    sluice_seawall::wire::encode_feedback(
        &[sluice_seawall::wire::Report {
            port: 1,
            received: 0,
            lost: 1000,
            next_seq: 1000,
            congested: true,
        }],
        &mut forged,
    );
    let far = build::udp_v4([10, 0, 0, 1], [10, 9, 1, 1], 1, 2, &[7u8; 1000]);
    let batch = frames(vec![far.clone(); 10]);
    let mut plan = TxPlan::new();
    tx.set_now(ms);
    tx.process_vm_batch(1, &batch, &mut plan);
    assert_eq!(plan.outs.len(), 10);
    let msgs: Vec<Vec<u8>> = plan.outs.iter().map(|o| plan.message(&batch, o)).collect();
    let mut plan1 = TxPlan::new();
    tx.process_udp_batch(&mut from(from3, vec![forged]), &mut plan1);
    assert_eq!(tx.stats().drops_of(DropReason::AuthFailed), 1);
    assert_eq!(tx.stats().seawall_feedback_received, 0);
    let untouched = tx.seawall_entities()[0].2.decreases;
    assert_eq!(untouched, 0);

    // Host 3 gets 8 of the 10 and reports, sealed.
    let got: Vec<Vec<u8>> = msgs
        .iter()
        .enumerate()
        .filter(|(k, _)| *k != 4 && *k != 5)
        .map(|(_, m)| m.clone())
        .collect();
    let mut plan3 = TxPlan::new();
    rx.set_now(ms);
    rx.process_udp_batch(&mut from(from1, got), &mut plan3);
    let due = rx.next_deadline().unwrap();
    rx.set_now(due);
    plan3.clear();
    rx.seawall_tick(&mut plan3);
    assert_eq!(plan3.outs.len(), 1);
    let empty: Vec<(Vec<u8>, Option<SocketAddrV4>)> = Vec::new();
    let fb = plan3.message(&empty, &plan3.outs[0]);
    assert!(sluice_seawall::wire::is_feedback(&fb));
    let g = sluice_switch::tunnel::parse_control_payload(&fb).unwrap();
    assert!(g.auth.is_some(), "the report carries the seal's option");
    assert_eq!(rx.stats().seawall_feedback_sent, 1);

    // Host 1 opens and applies it; a replay of it is refused.
    tx.set_now(due);
    plan1.clear();
    tx.process_udp_batch(&mut from(from3, vec![fb.clone()]), &mut plan1);
    assert_eq!(tx.stats().seawall_feedback_received, 1);
    let st = tx.seawall_entities()[0].2;
    assert_eq!(
        (st.reported_received, st.reported_lost, st.decreases),
        (8, 2, 1)
    );
    tx.process_udp_batch(&mut from(from3, vec![fb]), &mut plan1);
    assert_eq!(tx.stats().drops_of(DropReason::Replayed), 1);
    assert_eq!(tx.stats().seawall_feedback_received, 1);
    assert!(plan1.is_empty());
}

#[test]
fn sealed_fabric_traffic_flows_and_forgeries_replays_and_plain_datagrams_are_dropped() {
    let mut c1 = two_vms();
    c1.fabric_auth = Some(fabric_keys(1, &[2, 3]));
    let mut c3 = two_vms();
    c3.host = 3;
    c3.fabric_auth = Some(fabric_keys(3, &[1, 2]));
    c3.tenants[0].entries[2].actions = vec![Action::Output(Output::Port(PortId(2)))];
    let mut h1 = Dataplane::new(1, &c1).unwrap();
    let mut h3 = Dataplane::new(3, &c3).unwrap();
    assert!(h1.sealing() && h3.sealing());
    h1.set_now(5_000);

    // VM 1 on host 1 to 10.9.0.7 on host 3: sealed, the frame not in clear.
    let f = with_macs(
        build::udp_v4([10, 0, 0, 1], [10, 9, 0, 7], 1, 2, b"secret payload"),
        ROUTER_MAC,
        [2, 0, 0, 0, 1, 1],
    );
    let batch = frames(vec![f.clone(), f.clone()]);
    let mut plan = TxPlan::new();
    h1.process_vm_batch(1, &batch, &mut plan);
    assert_eq!(plan.outs.len(), 2);
    let to3 = SocketAddrV4::new(underlay(3), GENEVE_PORT);
    assert_eq!(plan.outs[0].dest, Dest::Udp(to3));
    let sealed: Vec<Vec<u8>> = plan.outs.iter().map(|o| plan.message(&batch, o)).collect();
    assert_eq!(sealed[0].len(), 8 + f.len() + SEAL_OVERHEAD);
    assert!(!sealed[0].windows(14).any(|w| w == b"secret payload"));
    let g = parse_fabric_payload(&sealed[0]).unwrap();
    assert_eq!((g.vni, g.auth.unwrap().counter), (7, 5_000));

    // Host 3 opens both and delivers them to its VM 2, byte for byte.
    let from1 = SocketAddrV4::new(underlay(1), GENEVE_PORT);
    let mut rx = from(from1, sealed.clone());
    let mut out = TxPlan::new();
    h3.process_udp_batch(&mut rx, &mut out);
    assert_eq!(out.outs.len(), 2, "{:?}", h3.stats().drops);
    assert_eq!(out.outs[0].dest, Dest::Vm(2));
    assert_eq!(out.message(&rx, &out.outs[0])[12..], f[12..]);

    // A replay of the first, the same frame unsealed from host 1's address
    // (valid VNI, registered peer), one sealed with host 2's key as if from
    // host 1, one with a flipped ciphertext bit: none reaches the VM.
    let plain = encap(7, None, &f[..]);
    let mut forged2 = two_vms();
    forged2.host = 2;
    forged2.fabric_auth = Some(fabric_keys(2, &[3]));
    forged2.tenants[0].entries[2].actions = vec![Action::Output(Output::Host(HostId(3)))];
    let mut h2 = Dataplane::new(2, &forged2).unwrap();
    h2.set_now(9_000);
    let mut p2 = TxPlan::new();
    h2.process_vm_batch(1, &batch, &mut p2);
    let wrong_key = p2.message(&batch, &p2.outs[0]);
    plan.clear();
    let one = frames(vec![f.clone()]);
    h1.process_vm_batch(1, &one, &mut plan);
    let fresh = plan.message(&one, &plan.outs[0]);
    let mut flipped = fresh.clone();
    let last = flipped.len() - 20;
    flipped[last] ^= 0x80;
    let mut replayed_flipped = sealed[1].clone();
    replayed_flipped[last] ^= 0x80;
    out.clear();
    let mut bad = from(
        from1,
        vec![
            sealed[0].clone(),
            plain,
            wrong_key,
            flipped,
            replayed_flipped,
        ],
    );
    h3.process_udp_batch(&mut bad, &mut out);
    assert!(out.outs.is_empty(), "{:?}", out.outs);
    let s = h3.stats();
    assert_eq!(s.drops_of(DropReason::Replayed), 2);
    assert_eq!(s.drops_of(DropReason::AuthFailed), 3);
    // The forgery of the fresh one did not use up its counter.
    h3.process_udp_batch(&mut from(from1, vec![fresh]), &mut out);
    assert_eq!(out.outs.len(), 1);

    // Without sealing, a sealed datagram cannot be read: dropped.
    let mut open = Dataplane::new(3, &{
        let mut c = c3.clone();
        c.fabric_auth = None;
        c
    })
    .unwrap();
    out.clear();
    open.process_udp_batch(&mut from(from1, vec![sealed[0].clone()]), &mut out);
    assert!(out.outs.is_empty());
    assert_eq!(open.stats().drops_of(DropReason::UnknownKey), 1);
}

/// Heartbeats every 10 ms, except that every 25th arrives late by `stall` ms
/// (a loaded core, a slow store batch): how many times is the live instance
/// suspected over 2,000 heartbeats (80 stalls), checked every millisecond?
/// Returns (over the first 1,000, over the last 1,000).
fn suspicions_of_a_live_instance_under_load(stall_ms: u64) -> (u64, u64) {
    let ms = 1_000_000u64;
    let mut dp = Dataplane::new(1, &figure4_host1()).unwrap();
    // The mechanism at a 30 ms floor (the default is 150 ms).
    dp.set_suspect_after(30_000_000);
    let mut now = 1000 * ms;
    dp.set_now(now);
    ready(&mut dp, &[10]);
    let mut first = 0;
    for i in 1..=2000u64 {
        if i == 1001 {
            first = dp.stats().failovers;
        }
        let next = now
            + if i % 25 == 0 {
                (10 + stall_ms) * ms
            } else {
                10 * ms
            };
        while now < next {
            now += ms;
            dp.check_health(now, || now);
        }
        dp.set_now(now);
        ready(&mut dp, &[10]);
    }
    (first, dp.stats().failovers - first)
}

#[test]
fn load_jitter_does_not_fail_over_a_live_instance() {
    // 45 ms late is past the 30 ms floor: a fixed timeout would fail the live
    // instance over at every stall. The adaptive one learns the jitter from the
    // first few stalls and then never suspects it again.
    let (learning, learned) = suspicions_of_a_live_instance_under_load(45);
    assert!((1..=5).contains(&learning), "while learning: {learning}");
    assert_eq!(learned, 0, "once learned");
    // Stalls longer than the ceiling are suspected every time: they are hangs.
    assert_eq!(suspicions_of_a_live_instance_under_load(300), (40, 40));
}

#[test]
fn a_hung_instance_is_suspected_within_the_ceiling_even_after_jitter() {
    let ms = 1_000_000u64;
    let mut dp = Dataplane::new(1, &figure4_host1()).unwrap();
    let mut now = 1000 * ms;
    dp.set_now(now);
    ready(&mut dp, &[10, 11, 12]);
    for i in 0..200u64 {
        now += if i % 2 == 0 { 5 * ms } else { 45 * ms };
        dp.set_now(now);
        ready(&mut dp, &[10, 11, 12]);
    }
    let last = now;
    // Silence: not suspected after 60 ms (jitter of this size is normal here) ...
    assert!(!dp.check_health(last + 60 * ms, || last + 60 * ms));
    let deadline = dp.next_deadline().expect("a deadline");
    assert!(deadline > last + 60 * ms && deadline <= last + MAX_SUSPECT_NS);
    // ... but at the adaptive deadline, at most the ceiling (checked as the
    // agent's loop does, at least every 10 ms: sparser checks would be a
    // stall of the agent itself).
    let mut t = last + 60 * ms;
    while !dp.check_health(t, || t) {
        t += ms;
        assert!(t <= deadline + ms, "not suspected by its deadline");
    }
    assert!(dp.suspected(10));
    assert_eq!(dp.failover_events()[0].suspected_at_us, deadline / 1000);
}

/// Replays heartbeat intervals (ms) from one live instance through the data
/// plane, checking health every millisecond; returns the failovers it caused.
fn failovers_over(intervals: &[u64]) -> u64 {
    let ms = 1_000_000u64;
    let mut dp = Dataplane::new(1, &figure4_host1()).unwrap();
    let mut now = 1000 * ms;
    dp.set_now(now);
    ready(&mut dp, &[10]);
    for gap in intervals {
        let next = now + gap * ms;
        while now < next {
            now += ms;
            dp.check_health(now, || now);
        }
        dp.set_now(now);
        ready(&mut dp, &[10]);
    }
    dp.stats().failovers
}

/// Intervals of a heartbeat every 10 ms on a loaded machine: each late by an
/// exponentially distributed delay of mean `mean_ms` (seeded, reproducible).
fn loaded_intervals(n: usize, mean_ms: f64, seed: u64) -> Vec<u64> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            // xorshift64*: a fixed sequence, no dependency.
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let u = (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64;
            10 + (-mean_ms * (1.0 - u).ln()).round() as u64
        })
        .collect()
}

/// The detector against a fixed 30 ms timeout on the same traces (a fixed
/// timeout suspects exactly the intervals longer than it): printed with
/// `cargo test -p sluice-agent --lib detector_against_a_fixed_timeout -- --nocapture`
/// (docs/BENCHMARKS.md), and asserted where the answer is not a matter of degree.
#[test]
fn detector_against_a_fixed_timeout() {
    println!("trace (10 ms heartbeats, 6,000)       fixed 30 ms  adaptive");
    for (mean, seed) in [(2.0, 1), (5.0, 2), (10.0, 3), (20.0, 4)] {
        let t = loaded_intervals(6000, mean, seed);
        let fixed = t.iter().filter(|&&g| g > 30).count() as u64;
        let adaptive = failovers_over(&t);
        println!("late by Exp(mean {mean:>4} ms)              {fixed:>8}  {adaptive:>8}");
        assert!(adaptive <= fixed, "never worse than the fixed timeout");
        if fixed >= 20 {
            assert!(adaptive * 4 <= fixed, "mean {mean}: {adaptive} vs {fixed}");
        }
    }
    let mut periodic = vec![10u64; 6000];
    for g in periodic.iter_mut().skip(24).step_by(25) {
        *g = 55;
    }
    let fixed = periodic.iter().filter(|&&g| g > 30).count() as u64;
    let adaptive = failovers_over(&periodic);
    println!("every 25th 45 ms late                   {fixed:>8}  {adaptive:>8}");
    assert!(adaptive <= 5);
}

/// One Seawall period at `now` between host 1 (`tx`, four numbered packets
/// of `far`, the second lost on the way) and host 3 (`rx`, which also gets
/// 100 unnumbered `flood` datagrams, 160 Mbit/s, from host 2), ending with
/// host 3's feedback tick: host 3's path is congested every period.
fn congested_period(tx: &mut Dataplane, rx: &mut Dataplane, far: &[u8], flood: &[u8], now: u64) {
    let period = sluice_seawall::Config::default().period_ns;
    let mut plan = TxPlan::new();
    tx.set_now(now);
    let batch = frames(vec![far.to_vec(); 4]);
    tx.process_vm_batch(1, &batch, &mut plan);
    let got: Vec<Vec<u8>> = plan
        .outs
        .iter()
        .enumerate()
        .filter(|(k, _)| *k != 1)
        .map(|(_, o)| plan.message(&batch, o))
        .collect();
    let mut p3 = TxPlan::new();
    rx.set_now(now);
    rx.process_udp_batch(
        &mut from(SocketAddrV4::new(underlay(1), GENEVE_PORT), got),
        &mut p3,
    );
    rx.process_udp_batch(
        &mut from(
            SocketAddrV4::new(underlay(2), GENEVE_PORT),
            vec![flood.to_vec(); 100],
        ),
        &mut p3,
    );
    rx.set_now(now + period / 2 + 1);
    p3.clear();
    rx.seawall_tick(&mut p3);
}

/// Seawall §4 on the receiving side: host 3 reports loss to host 1 every
/// period; host 2 sends unnumbered Geneve (no rate controller) far over any
/// allowance the whole time. Host 3 accuses host 2, and only host 2, and from
/// then on drops its packets (`accused_peer`) while host 1's still come in.
#[test]
fn a_peer_that_ignores_congestion_is_accused_and_sandboxed() {
    let period = sluice_seawall::Config::default().period_ns;
    let mut tx = Dataplane::new(1, &two_vms()).unwrap();
    tx.set_seawall(Some(sluice_seawall::Config::default()));
    let mut rx_cfg = two_vms();
    rx_cfg.host = 3;
    let mut rx = Dataplane::new(3, &rx_cfg).unwrap();
    rx.set_seawall(Some(sluice_seawall::Config::default()));
    let far = build::udp_v4([10, 0, 0, 1], [10, 9, 1, 1], 1, 2, &[7u8; 1000]);
    let flood = encap(7, None, &far);
    let mut accused_at = None;
    for p in 1..=200u64 {
        congested_period(&mut tx, &mut rx, &far, &flood, p * period);
        if accused_at.is_none() && !rx.accusations().is_empty() {
            accused_at = Some(p);
        }
    }
    let acc = rx.accusations();
    assert_eq!(acc.iter().map(|a| a.host).collect::<Vec<_>>(), vec![2]);
    assert!(acc[0].rate_bps > acc[0].allowance_bps, "{acc:?}");
    assert!(
        accused_at.unwrap() < 100,
        "accused only at period {accused_at:?}"
    );
    // Every flood packet after the accusation was dropped, none of host 1's.
    let dropped = rx.stats().drops_of(DropReason::AccusedPeer);
    assert_eq!(dropped, (200 - accused_at.unwrap()) * 100);

    // An operator releases host 2: the next configuration pardons it, the
    // accusation goes at once and its packets are read again.
    let mut cfg = rx_cfg.clone();
    cfg.pardons = vec![sluice_proto::Pardon {
        host: 2,
        generation: 1,
    }];
    let mut next = Dataplane::new(3, &cfg).unwrap();
    next.inherit_stats(&rx);
    assert!(next.accusations().is_empty());
    let mut p3 = TxPlan::new();
    next.set_now(201 * period);
    next.process_udp_batch(
        &mut from(
            SocketAddrV4::new(underlay(2), GENEVE_PORT),
            vec![flood.clone(); 3],
        ),
        &mut p3,
    );
    assert_eq!(next.stats().drops_of(DropReason::AccusedPeer), dropped);

    // A later configuration with the same generation is no new pardon: an
    // accusation made since stands.
    let mut rx = next;
    for p in 202..=400u64 {
        congested_period(&mut tx, &mut rx, &far, &flood, p * period);
    }
    assert_eq!(rx.accusations().len(), 1, "accused anew");
    let mut again = Dataplane::new(3, &cfg).unwrap();
    again.inherit_stats(&rx);
    assert_eq!(
        again.accusations().len(),
        1,
        "the old pardon does not clear it"
    );
}

/// Seawall §4's invariant: for a tenant it runs no NF instance or gateway
/// of, a peer may send only from its own VMs' addresses. Host 2 has VM
/// 10.0.0.9: its packets from there reach VM 2; packets it sends "from"
/// 10.0.0.1 (VM 1, on this host) or behind a VLAN tag are dropped as
/// spoofed_source; a tenant with no such list is not checked.
#[test]
fn a_peer_cannot_send_from_another_hosts_vm_address() {
    let mut cfg = two_vms();
    cfg.tenants[0].sources = Some(vec![sluice_proto::PeerSources {
        host: 2,
        addrs: vec!["10.0.0.9".parse().unwrap()],
    }]);
    let mut dp = Dataplane::new(1, &cfg).unwrap();
    let peer2 = SocketAddrV4::new(underlay(2), GENEVE_PORT);
    let own = build::udp_v4([10, 0, 0, 9], [10, 0, 0, 2], 1000, 2000, b"mine");
    let spoofed = build::udp_v4([10, 0, 0, 1], [10, 0, 0, 2], 1000, 2000, b"framed");
    let mut tagged = spoofed[..12].to_vec();
    tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
    tagged.extend_from_slice(&spoofed[12..]);
    let mut plan = TxPlan::new();
    let mut batch = from(
        peer2,
        vec![
            encap(7, None, &own),
            encap(7, None, &spoofed),
            encap(7, None, &tagged),
        ],
    );
    dp.process_udp_batch(&mut batch, &mut plan);
    assert_eq!(plan.outs.len(), 1, "only the packet from its own VM");
    assert_eq!(plan.outs[0].dest, Dest::Vm(2));
    assert_eq!(dp.stats().drops_of(DropReason::SpoofedSource), 2);

    // Without the list (an older controller), nothing is checked.
    let mut dp = Dataplane::new(1, &two_vms()).unwrap();
    let mut plan = TxPlan::new();
    let mut batch = from(peer2, vec![encap(7, None, &spoofed)]);
    dp.process_udp_batch(&mut batch, &mut plan);
    assert_eq!(plan.outs.len(), 1);
    assert_eq!(dp.stats().drops_of(DropReason::SpoofedSource), 0);
}

/// `sluice experiment chaos`'s soak found bursts of false failovers: every
/// instance of a host suspected at once after a machine-wide stall, which
/// had stopped the agent as well as its instances. A check long after the
/// previous one holds nobody's silence over that time against them; silence
/// after the agent runs again still does.
#[test]
fn a_stall_of_the_agent_itself_fails_nobody_over() {
    let mut dp = Dataplane::new(1, &figure4_host1()).unwrap();
    let ms = 1_000_000u64;
    let mut now = regular_heartbeats(&mut dp, &[10, 11, 12], 1000 * ms, 20);
    // Neither the agent nor its instances run for 400 ms.
    now += 400 * ms;
    dp.set_now(now);
    assert!(
        !dp.check_health(now, || now),
        "a stall of its own is no instance's fault: {:?}",
        dp.failover_events()
    );
    assert_eq!(dp.stats().agent_stalls, 1);
    assert_eq!(dp.stats().failovers, 0);
    // Ports 10 and 11 heartbeat again; 12 stays silent and is suspected
    // within the ceiling of the resume, not before the floor.
    let resumed = now;
    let mut suspected_at = None;
    while now < resumed + 400 * ms {
        now += 10 * ms;
        dp.set_now(now);
        ready(&mut dp, &[10, 11]);
        if dp.check_health(now, || now) && suspected_at.is_none() {
            suspected_at = Some(now);
        }
    }
    let at = suspected_at.expect("the instance silent after the resume is suspected");
    assert!(
        at - resumed > 30 * ms && at - resumed <= 260 * ms,
        "{}",
        (at - resumed) / ms
    );
    assert!(dp.suspected(12) && !dp.suspected(10) && !dp.suspected(11));
    assert_eq!(dp.stats().agent_stalls, 1, "regular checks are no stall");
    assert_eq!(dp.stats().failovers, 1);
}

/// Heartbeats share the Geneve socket's queue with the instances' data, so an
/// agent behind on reading sees every instance of its host silent at once.
/// Before acting on a silence the loop reads the queue
/// (`suspicion_due` → `read_before_suspecting`): heartbeats found there
/// clear the instances that sent them; a queue it could not empty holds
/// silence against nobody before the ceiling, and a hung instance is still
/// suspected then.
#[test]
fn silence_is_confirmed_by_reading_the_queue_first() {
    let mut dp = Dataplane::new(1, &figure4_host1()).unwrap();
    let ms = 1_000_000u64;
    let mut now = regular_heartbeats(&mut dp, &[10, 11, 12], 1000 * ms, 20);
    let last = now;
    // The agent falls behind: heartbeats of 10 and 11 wait in the queue, 12
    // is hung. Checks every 10 ms read nothing until a silence is due.
    let mut confirms = 0;
    loop {
        now += 10 * ms;
        assert!(now < last + 250 * ms, "a silence became due");
        if dp.suspicion_due(now) {
            // The confirmation read empties the queue and finds 10's and
            // 11's heartbeats, not 12's.
            dp.set_now(now);
            ready(&mut dp, &[10, 11]);
            dp.read_before_suspecting(false);
            confirms += 1;
            assert!(dp.check_health(now, || now));
            break;
        }
        assert!(!dp.check_health(now, || now));
    }
    assert_eq!(confirms, 1);
    assert!(dp.suspected(12) && !dp.suspected(10) && !dp.suspected(11));
    assert_eq!(dp.stats().health_confirms, 1);
    assert_eq!(dp.stats().health_backlogs, 0);

    // Now a queue the agent cannot empty and nothing from 10 or 11 in what
    // it read: nobody is suspected before the ceiling, and both are after it.
    let quiet = now;
    let mut suspected_at = None;
    while suspected_at.is_none() {
        now += 10 * ms;
        assert!(now <= quiet + 400 * ms, "never suspected");
        if dp.suspicion_due(now) {
            dp.read_before_suspecting(true);
        }
        if dp.check_health(now, || now) {
            suspected_at = Some(now);
        }
    }
    let waited = suspected_at.unwrap() - quiet;
    assert!(
        waited > 240 * ms && waited <= 260 * ms,
        "{} ms",
        waited / ms
    );
    assert!(dp.suspected(10) && dp.suspected(11));
    assert!(dp.stats().health_backlogs >= 1);
    // Every confirmation with the queue it could not empty cleared the check
    // it preceded, until the ceiling.
    assert_eq!(dp.stats().health_cleared, dp.stats().health_backlogs - 1);
}

/// `rounds` of heartbeats from `ports` and health checks, 10 ms apart after
/// `from` (ns), none of which finds anything due or suspects anyone; returns
/// the last round's time.
fn regular_heartbeats(dp: &mut Dataplane, ports: &[u16], from: u64, rounds: usize) -> u64 {
    let mut now = from;
    for _ in 0..rounds {
        now += 10_000_000;
        dp.set_now(now);
        ready(dp, ports);
        assert!(!dp.suspicion_due(now));
        assert!(!dp.check_health(now, || now));
    }
    now
}

#[test]
fn health_checks_probe_a_vm_port_and_their_answers_never_reach_a_fib() {
    let mut cfg = two_vms();
    cfg.health_checks = vec![sluice_proto::HealthCheck {
        tenant: "t".into(),
        middlebox: "lb".into(),
        backend: "10.0.0.1".into(),
        port: 1,
        addr: Ipv4Addr::new(10, 0, 0, 1),
        tcp_port: 80,
        http_path: None,
        interval_ms: 2000,
        timeout_ms: 1000,
    }];
    let mut dp = Dataplane::new(1, &cfg).unwrap();
    let mut plan = TxPlan::new();
    dp.set_now(5_000_000_000);
    assert!(!dp.probe_tick(&mut plan), "nothing ended yet");
    assert_eq!(plan.outs.len(), 1);
    assert_eq!(plan.outs[0].dest, Dest::Vm(1));
    let syn = plan.head(&plan.outs[0]).to_vec();
    assert_eq!(&syn[26..30], &sluice_proto::PROBE_SOURCE.octets());
    assert_eq!(&syn[30..34], &[10, 0, 0, 1]);
    assert_eq!(syn[47], SYN);
    let sport = u16::from_be_bytes([syn[34], syn[35]]);
    let iss = u32::from_be_bytes([syn[38], syn[39], syn[40], syn[41]]);
    // The VM answers through its default route, to the router MAC.
    let synack = with_macs(
        build::tcp_v4(
            [10, 0, 0, 1],
            sluice_proto::PROBE_SOURCE.octets(),
            80,
            sport,
            99,
            iss.wrapping_add(1),
            SYN | sluice_wire::tcp::flags::ACK,
            &[],
        ),
        ROUTER_MAC,
        [2, 0, 0, 0, 1, 1],
    );
    // Tenant traffic in the same batch still forwards.
    let tenant = with_macs(
        build::tcp_v4([10, 0, 0, 1], [10, 0, 0, 2], 1000, 80, 1, 0, SYN, &[]),
        ROUTER_MAC,
        [2, 0, 0, 0, 1, 1],
    );
    plan.clear();
    dp.process_vm_batch(1, &frames(vec![synack.clone(), tenant]), &mut plan);
    let dests: Vec<Dest> = plan.outs.iter().map(|o| o.dest).collect();
    assert_eq!(
        dests,
        vec![Dest::Vm(1), Dest::Vm(2)],
        "a RST back, the tenant's SYN on"
    );
    assert_eq!(plan.head(&plan.outs[0])[47], sluice_wire::tcp::flags::RST);
    let r = dp.backend_checks();
    assert_eq!((r[0].ok, r[0].failed), (1, 0));
    assert_eq!(r[0].last, Some(sluice_proto::CheckOutcome::Ok));
    // A second copy matches no check in flight: dropped, not forwarded.
    plan.clear();
    dp.process_vm_batch(1, &frames(vec![synack]), &mut plan);
    assert!(plan.outs.is_empty());
    assert_eq!(dp.unmatched_probe_answers(), 1);
    // A new configuration keeps what was counted.
    let mut next = Dataplane::new(1, &cfg).unwrap();
    next.inherit_stats(&dp);
    assert_eq!(next.backend_checks()[0].ok, 1);
    // Unanswered: the next check times out.
    next.set_now(7_000_000_000);
    plan.clear();
    next.probe_tick(&mut plan);
    assert_eq!(plan.outs.len(), 1);
    next.set_now(8_000_000_000);
    assert!(next.probe_tick(&mut plan));
    assert_eq!(next.backend_checks()[0].failed, 1);
}
