//! Sealed fabric (needs root): hosts 1 and 2 joined by a fabric link, tenant
//! A (VNI 7) with a VM on each, every datagram between the agents sealed with
//! the keys the controller derives. Legitimate traffic flows both ways; Geneve
//! sent from host 2's own underlay address with tenant A's VNI (a registered
//! peer, a VNI it may send: what the `peer_vni` check lets through) but plain,
//! or sealed under a key of another fabric, never reaches a VM and is counted
//! (`auth_failed`); the same datagram sealed under the right key arrives once,
//! and its replay is counted (`replayed`).

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::time::Duration;

use sluice_agent::dataplane::FabricSeal;
use sluice_agent::testing::{
    attach_vm, host_route, is_root, standalone_agent, two_hosts, underlay, VmHandle,
};
use sluice_controller::fabric::FabricSecret;

mod common;
use common::{delivered, drops, drops_when, listen, nothing_on};
use sluice_proto::{AgentConfig, Peer, PortConfig, TenantFib, GENEVE_PORT};
use sluice_switch::tunnel::geneve_header;
use sluice_switch::{HostId, Output, PortId};

const VNI_A: u32 = 7;
const LEGIT_PORT: u16 = 5000;
const SPOOF_PORT: u16 = 6000;

/// Host `h`'s configuration: its VM on port 1, the other host's VM behind
/// the fabric, the keys of `fabric` for its link.
fn config(h: u32, vm: &VmHandle, other: Ipv4Addr, fabric: &FabricSecret) -> AgentConfig {
    let o = 3 - h;
    AgentConfig {
        pardons: Vec::new(),
        health_checks: Vec::new(),
        version: 1,
        host: h,
        peers: [1, 2]
            .iter()
            .map(|&p| Peer {
                host: p,
                underlay: underlay(p),
            })
            .collect(),
        ports: vec![PortConfig {
            id: 1,
            vni: VNI_A,
            kind: vm.port_kind(),
        }],
        tenants: vec![TenantFib {
            tenant: "a".into(),
            vni: VNI_A,
            entries: vec![
                host_route(1, vm.addr, Output::Port(PortId(1))),
                host_route(2, other, Output::Host(HostId(o))),
            ],
            groups: vec![],
            senders: Some(vec![o]),
            sources: None,
            chains: Vec::new(),
        }],
        instances: vec![],
        group_policies: vec![],
        fabric_auth: Some(fabric.keys_for(h, [1, 2])),
    }
}

fn put(url: &str, cfg: &AgentConfig) {
    let r = ureq::put(&format!("{url}/v1/config")).send_json(cfg);
    assert_eq!(r.map(|r| r.status()).ok(), Some(200), "config refused");
}

/// A UDP datagram `src -> dst:SPOOF_PORT` of tenant A; Geneve header and frame.
fn spoof(src: Ipv4Addr, dst: Ipv4Addr) -> (Vec<u8>, Vec<u8>) {
    let (h, n) = geneve_header(VNI_A, None);
    let frame = sluice_wire::build::udp_v4(src.octets(), dst.octets(), 4242, SPOOF_PORT, b"forged");
    (h[..n].to_vec(), frame)
}

/// `spoof` sealed as host 2 sends to host 1 under `fabric`'s keys.
fn sealed(fabric: &FabricSecret, src: Ipv4Addr, dst: Ipv4Addr, counter: u64) -> Vec<u8> {
    let mut s = FabricSeal::new(Some(&fabric.keys_for(2, [1]))).unwrap();
    let (h, f) = spoof(src, dst);
    let mut out = Vec::new();
    let (a, b) = s.seal(1, counter, &h, &f, &mut out).unwrap();
    out[a as usize..b as usize].to_vec()
}

#[test]
fn sealed_fabric_carries_traffic_and_refuses_forgeries_and_replays() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let (h1, h2) = two_hosts().unwrap();
    let (a1, a2) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let vm1 = attach_vm(h1.name(), "vm1", a1).unwrap();
    let vm2 = attach_vm(h2.name(), "vm2", a2).unwrap();
    let ag1 = standalone_agent(1, &h1).unwrap();
    let ag2 = standalone_agent(2, &h2).unwrap();
    let (url1, url2) = (ag1.api_url(), ag2.api_url());
    let fabric = FabricSecret::new([0x5a; 32]);
    put(&url1, &config(1, &vm1, a2, &fabric));
    put(&url2, &config(2, &vm2, a1, &fabric));

    // Both ways, sealed.
    let (legit1, legit2) = (
        listen(&vm1.ns, a1, LEGIT_PORT),
        listen(&vm2.ns, a2, LEGIT_PORT),
    );
    assert!(delivered(
        &legit2,
        SocketAddr::from((a1, LEGIT_PORT)),
        b"to 1",
        &legit1
    ));
    assert!(delivered(
        &legit1,
        SocketAddr::from((a2, LEGIT_PORT)),
        b"to 2",
        &legit2
    ));
    let spoof1 = listen(&vm1.ns, a1, SPOOF_PORT);

    // From host 2's own underlay address, tenant A's VNI: plain Geneve, and
    // Geneve sealed under another fabric's key for the same link.
    let fabric1 = SocketAddr::from((underlay(1), GENEVE_PORT));
    let host2_sock = h2
        .run(|| UdpSocket::bind(SocketAddrV4::new(underlay(2), 0)))
        .unwrap()
        .unwrap();
    let before = drops(&url1, "auth_failed");
    let other = FabricSecret::new([0x77; 32]);
    const N: u64 = 5;
    for i in 0..N {
        let (h, f) = spoof(a2, a1);
        host2_sock.send_to(&[h, f].concat(), fabric1).unwrap();
        let forged = sealed(&other, a2, a1, u64::MAX / 2 + i);
        host2_sock.send_to(&forged, fabric1).unwrap();
    }
    assert_eq!(
        drops_when(&url1, "auth_failed", before + 2 * N),
        before + 2 * N
    );
    // Legitimate traffic went through host 1 after all of them: none is on
    // its way to the VM.
    assert!(delivered(
        &legit2,
        SocketAddr::from((a1, LEGIT_PORT)),
        b"again",
        &legit1
    ));
    assert!(nothing_on(&spoof1), "a forged datagram reached vm1");

    // The same datagram under the right key arrives (the drops were the
    // seal's, not a frame no VM would take); its replay is dropped. (Last:
    // its counter, far ahead of agent 2's, moves host 1's window past what
    // agent 2 sends next.)
    let genuine = sealed(&fabric, a2, a1, u64::MAX / 2);
    let before_replay = drops(&url1, "replayed");
    host2_sock.send_to(&genuine, fabric1).unwrap();
    let mut got = [0u8; 64];
    spoof1
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let n = spoof1.recv(&mut got).expect("the genuine datagram arrives");
    assert_eq!(&got[..n], b"forged");
    host2_sock.send_to(&genuine, fabric1).unwrap();
    assert_eq!(
        drops_when(&url1, "replayed", before_replay + 1),
        before_replay + 1
    );
    // (Counted, so handled: were it delivered, it would be there now.)
    assert!(nothing_on(&spoof1), "a replayed datagram reached vm1");
    assert_eq!(drops(&url2, "auth_failed"), 0);

    ag1.shutdown();
    ag2.shutdown();
}
