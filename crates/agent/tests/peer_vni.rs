//! Spoofed Geneve never reaches a VM (needs root): hosts 1 and 2 joined by a
//! fabric link, tenant A (VNI 7) with a VM on each, tenant B (VNI 8) with a VM
//! on host 1 only, and a rogue namespace on a second link into host 1 that is
//! no registered host. Host 1 drops Geneve from the rogue namespace
//! (`unknown_source`) and tenant B's Geneve from host 2, which has nothing of
//! B (`peer_vni`); tenant A's traffic between the hosts still flows, and the
//! very packet host 2 was refused is delivered once B is placed on host 2.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use sluice_agent::testing::{
    agent_status, attach_vm, host_route, is_root, standalone_agent, two_hosts, underlay, VmHandle,
};
use sluice_netns::Netns;

mod common;
use common::{delivered, drops, drops_when, listen, nothing_on};
use sluice_proto::{AgentConfig, Peer, PortConfig, TenantFib, GENEVE_PORT};
use sluice_switch::tunnel::geneve_header;
use sluice_switch::{HostId, Output, PortId};

const VNI_A: u32 = 7;
const VNI_B: u32 = 8;
/// Where the VMs listen for tenant A's legitimate datagrams.
const LEGIT_PORT: u16 = 5000;
/// Where the VMs listen for what only a spoofer sends.
const SPOOF_PORT: u16 = 6000;
/// The rogue namespace's address, and host 1's on the same link.
const ROGUE: Ipv4Addr = Ipv4Addr::new(10, 254, 0, 9);
const HOST1_FROM_ROGUE: Ipv4Addr = Ipv4Addr::new(10, 254, 0, 1);

fn tenant(name: &str, vni: u32, routes: &[(Ipv4Addr, Output)], senders: &[u32]) -> TenantFib {
    TenantFib {
        tenant: name.into(),
        vni,
        entries: routes
            .iter()
            .enumerate()
            .map(|(i, (a, o))| host_route(i as u64 + 1, *a, *o))
            .collect(),
        groups: vec![],
        senders: Some(senders.to_vec()),
        sources: None,
        chains: Vec::new(),
    }
}

fn peers() -> Vec<Peer> {
    [1, 2]
        .iter()
        .map(|&h| Peer {
            host: h,
            underlay: underlay(h),
        })
        .collect()
}

/// Host 1: A's `vm1` on port 1 (A's `vm2` on host 2), B's `vmb` on port 3,
/// B sendable by `b_senders`.
fn host1(
    version: u64,
    vm1: &VmHandle,
    vm2: Ipv4Addr,
    vmb: &VmHandle,
    b_senders: &[u32],
) -> AgentConfig {
    AgentConfig {
        pardons: Vec::new(),
        health_checks: Vec::new(),
        version,
        host: 1,
        peers: peers(),
        ports: vec![
            PortConfig {
                id: 1,
                vni: VNI_A,
                kind: vm1.port_kind(),
            },
            PortConfig {
                id: 3,
                vni: VNI_B,
                kind: vmb.port_kind(),
            },
        ],
        tenants: vec![
            tenant(
                "a",
                VNI_A,
                &[
                    (vm1.addr, Output::Port(PortId(1))),
                    (vm2, Output::Host(HostId(2))),
                ],
                &[2],
            ),
            tenant(
                "b",
                VNI_B,
                &[(vmb.addr, Output::Port(PortId(3)))],
                b_senders,
            ),
        ],
        instances: vec![],
        group_policies: vec![],
        fabric_auth: None,
    }
}

/// Host 2: A's `vm2` on port 1; nothing of B.
fn host2(vm2: &VmHandle, vm1: Ipv4Addr) -> AgentConfig {
    AgentConfig {
        pardons: Vec::new(),
        health_checks: Vec::new(),
        version: 1,
        host: 2,
        peers: peers(),
        ports: vec![PortConfig {
            id: 1,
            vni: VNI_A,
            kind: vm2.port_kind(),
        }],
        tenants: vec![tenant(
            "a",
            VNI_A,
            &[
                (vm2.addr, Output::Port(PortId(1))),
                (vm1, Output::Host(HostId(1))),
            ],
            &[1],
        )],
        instances: vec![],
        group_policies: vec![],
        fabric_auth: None,
    }
}

fn put(url: &str, cfg: &AgentConfig) {
    let r = ureq::put(&format!("{url}/v1/config")).send_json(cfg);
    assert_eq!(r.map(|r| r.status()).ok(), Some(200), "config refused");
}

/// A Geneve datagram for `vni` carrying a UDP datagram to `dst:SPOOF_PORT`.
fn spoof(vni: u32, src: Ipv4Addr, dst: Ipv4Addr) -> Vec<u8> {
    let (h, n) = geneve_header(vni, None);
    let mut d = h[..n].to_vec();
    d.extend(sluice_wire::build::udp_v4(
        src.octets(),
        dst.octets(),
        4242,
        SPOOF_PORT,
        b"spoofed",
    ));
    d
}

#[test]
fn spoofed_geneve_never_reaches_a_vm() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let (h1, h2) = two_hosts().unwrap();
    // The rogue namespace: on the underlay, but no registered host.
    let rogue = Netns::new("r").unwrap();
    sluice_netns::veth(&h1, "fab1", &rogue, "fab0").unwrap();
    h1.addr("fab1", &format!("{HOST1_FROM_ROGUE}/24")).unwrap();
    rogue.addr("fab0", &format!("{ROGUE}/24")).unwrap();

    let (a1, a2, b1) = (
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 0, 0, 2),
        Ipv4Addr::new(10, 0, 0, 3),
    );
    let vm1 = attach_vm(h1.name(), "vm1", a1).unwrap();
    let vm2 = attach_vm(h2.name(), "vm2", a2).unwrap();
    let vmb = attach_vm(h1.name(), "vmb", b1).unwrap();
    let ag1 = standalone_agent(1, &h1).unwrap();
    let ag2 = standalone_agent(2, &h2).unwrap();
    let (url1, url2) = (ag1.api_url(), ag2.api_url());
    put(&url1, &host1(1, &vm1, a2, &vmb, &[]));
    put(&url2, &host2(&vm2, a1));

    // Tenant A flows from host 2 to host 1.
    let legit1 = listen(&vm1.ns, a1, LEGIT_PORT);
    let spoof1 = listen(&vm1.ns, a1, SPOOF_PORT);
    let spoofb = listen(&vmb.ns, b1, SPOOF_PORT);
    let sender2 = listen(&vm2.ns, a2, LEGIT_PORT);
    let to_vm1 = SocketAddr::from((a1, LEGIT_PORT));
    assert!(delivered(&sender2, to_vm1, b"hello 1", &legit1));

    // Geneve from the rogue namespace (tenant A's and B's VNIs) and from host 2's
    // own underlay address with tenant B's VNI.
    let fabric1 = SocketAddr::from((underlay(1), GENEVE_PORT));
    let rogue_sock = rogue
        .run(|| UdpSocket::bind(SocketAddrV4::new(ROGUE, 0)))
        .unwrap()
        .unwrap();
    let host2_sock = h2
        .run(|| UdpSocket::bind(SocketAddrV4::new(underlay(2), 0)))
        .unwrap()
        .unwrap();
    let rogue_to_1 = SocketAddr::from((HOST1_FROM_ROGUE, GENEVE_PORT));
    let (before_unknown, before_peer) = (drops(&url1, "unknown_source"), drops(&url1, "peer_vni"));
    const N: u64 = 5;
    for _ in 0..N {
        rogue_sock
            .send_to(&spoof(VNI_A, a2, a1), rogue_to_1)
            .unwrap();
        rogue_sock
            .send_to(&spoof(VNI_B, a2, b1), rogue_to_1)
            .unwrap();
        host2_sock.send_to(&spoof(VNI_B, a2, b1), fabric1).unwrap();
    }
    assert_eq!(
        drops_when(&url1, "unknown_source", before_unknown + 2 * N),
        before_unknown + 2 * N
    );
    assert_eq!(
        drops_when(&url1, "peer_vni", before_peer + N),
        before_peer + N
    );
    // Host 2's agent saw none of it.
    assert_eq!(drops(&url2, "peer_vni"), 0);
    assert_eq!(drops(&url2, "unknown_source"), 0);

    // Legitimate traffic still flows, and went through host 1 after every
    // spoofed packet: none of those is still on its way to a VM.
    assert!(delivered(&sender2, to_vm1, b"hello 2", &legit1));
    assert!(nothing_on(&spoof1), "a spoofed packet reached vm1");
    assert!(nothing_on(&spoofb), "a spoofed packet reached vmb");
    let fabric = agent_status(&url1).fabric;
    assert!(fabric.drops >= 3 * N, "{fabric:?}");

    // Tenant B placed on host 2: the same packet from host 2 now arrives (the
    // drops above were the peer check's, not a packet no VM would take).
    put(&url1, &host1(2, &vm1, a2, &vmb, &[2]));
    let mut got = [0u8; 64];
    spoofb
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut arrived = false;
    while !arrived && Instant::now() < deadline {
        host2_sock.send_to(&spoof(VNI_B, a2, b1), fabric1).unwrap();
        arrived = spoofb.recv(&mut got).is_ok_and(|n| &got[..n] == b"spoofed");
    }
    assert!(
        arrived,
        "host 2's tenant B packet is not delivered once allowed"
    );

    ag1.shutdown();
    ag2.shutdown();
}
