//! Two hosts (needs root): agents in two host namespaces joined by a fabric link,
//! a VM on each; a TCP connection between the VMs crosses both agents as Geneve
//! over UDP, and the fabric counters see it.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use sluice_agent::testing::{
    agent_status_when, attach_vm, host_route, is_root, standalone_agent, two_hosts, underlay,
    VmHandle,
};
use sluice_proto::{AgentConfig, Peer, PortConfig, TenantFib};
use sluice_switch::{HostId, Output, PortId};

/// Host `h` with `vm` on port 1; the other VM is on host `other`.
fn config(h: u32, vm: &VmHandle, other: u32, other_addr: Ipv4Addr) -> AgentConfig {
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
            vni: 7,
            kind: vm.port_kind(),
        }],
        tenants: vec![TenantFib {
            tenant: "t".into(),
            vni: 7,
            entries: vec![
                host_route(1, vm.addr, Output::Port(PortId(1))),
                host_route(2, other_addr, Output::Host(HostId(other))),
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

#[test]
fn vms_on_two_hosts_talk_over_geneve() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let (h1, h2) = two_hosts().unwrap();
    let a1 = Ipv4Addr::new(10, 0, 0, 1);
    let a2 = Ipv4Addr::new(10, 0, 0, 2);
    let vm1 = attach_vm(h1.name(), "vm1", a1).unwrap();
    let vm2 = attach_vm(h2.name(), "vm2", a2).unwrap();
    let ag1 = standalone_agent(1, &h1).unwrap();
    let ag2 = standalone_agent(2, &h2).unwrap();
    for (ag, cfg) in [
        (&ag1, config(1, &vm1, 2, a2)),
        (&ag2, config(2, &vm2, 1, a1)),
    ] {
        let r = ureq::put(&format!("{}/v1/config", ag.api_url())).send_json(cfg);
        assert_eq!(r.map(|r| r.status()).ok(), Some(200));
    }

    let listener = vm2
        .ns
        .run(move || TcpListener::bind(SocketAddr::from((a2, 5000))))
        .unwrap()
        .unwrap();
    std::thread::spawn(move || {
        if let Ok((mut s, _)) = listener.accept() {
            let mut buf = [0u8; 4096];
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 || s.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    });
    let to = SocketAddr::from((a2, 5000));
    let mut s = vm1
        .ns
        .run(move || TcpStream::connect_timeout(&to, Duration::from_secs(10)))
        .unwrap()
        .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // Several full-sized segments: the fabric carries 1500-byte frames plus
    // Geneve on its 9000-byte MTU.
    let msg: Vec<u8> = (0..20_000u32).map(|i| i as u8).collect();
    s.write_all(&msg).unwrap();
    let mut back = vec![0u8; msg.len()];
    s.read_exact(&mut back).unwrap();
    assert_eq!(back, msg);

    let fabric = (
        agent_status_when(&ag1.api_url(), |s| s.fabric.tx_packets > 10)
            .fabric
            .tx_packets,
        agent_status_when(&ag2.api_url(), |s| s.fabric.rx_packets > 10)
            .fabric
            .rx_packets,
    );
    assert!(fabric.0 > 10 && fabric.1 > 10, "{fabric:?}");
    ag1.shutdown();
    ag2.shutdown();
}
