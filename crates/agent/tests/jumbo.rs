//! Jumbo frames through the agent (needs root): two VMs on one host whose
//! links all have MTU 9000, so TCP sends 9000-byte segments; megabytes cross
//! the agent's data plane intact, and its counters show frames of that size
//! read whole from the VM port (none truncated).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use sluice_agent::testing::{attach_vm, host_route, is_root, standalone_agent, VmHandle};
use sluice_netns::Netns;
use sluice_proto::{AgentConfig, PortConfig, TenantFib};
use sluice_switch::{Output, PortId};

fn config(vms: &[(u16, &VmHandle)]) -> AgentConfig {
    AgentConfig {
        pardons: Vec::new(),
        health_checks: Vec::new(),
        version: 1,
        host: 1,
        peers: vec![],
        ports: vms
            .iter()
            .map(|(id, vm)| PortConfig {
                id: *id,
                vni: 7,
                kind: vm.port_kind(),
            })
            .collect(),
        tenants: vec![TenantFib {
            tenant: "t".into(),
            vni: 7,
            entries: vms
                .iter()
                .map(|(id, vm)| host_route(u64::from(*id), vm.addr, Output::Port(PortId(*id))))
                .collect(),
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

fn pattern(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The sum of a metric over its label sets that contain `label` (0 if absent).
fn metric(url: &str, name: &str, label: &str) -> u64 {
    let m = ureq::get(&format!("{url}/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    m.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[test]
fn mtu_9000_frames_cross_the_agent_whole() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let h = Netns::new("h").unwrap();
    let (a1, a2) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let vm1 = attach_vm(h.name(), "vm1", a1).unwrap();
    let vm2 = attach_vm(h.name(), "vm2", a2).unwrap();
    // Before the agent opens its ports, so their rings are sized for the MTU.
    for vm in [&vm1, &vm2] {
        vm.ns.rtnl().unwrap().set_mtu("eth0", 9000).unwrap();
        h.rtnl().unwrap().set_mtu(&vm.iface, 9000).unwrap();
    }
    let ag = standalone_agent(1, &h).unwrap();
    let r = ureq::put(&format!("{}/v1/config", ag.api_url()))
        .send_json(config(&[(1, &vm1), (2, &vm2)]));
    assert_eq!(r.map(|r| r.status()).ok(), Some(200));

    let to = SocketAddr::from((a2, 5003));
    let listener = vm2.ns.run(move || TcpListener::bind(to)).unwrap().unwrap();
    let up = pattern(5, 8 << 20);
    let want = up.clone();
    let sink = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut got = vec![0u8; want.len()];
        s.read_exact(&mut got).unwrap();
        assert!(got == want, "bytes differ after crossing the agent");
        s.write_all(b"ok").unwrap();
    });
    let mut s = vm1
        .ns
        .run(move || TcpStream::connect_timeout(&to, Duration::from_secs(10)))
        .unwrap()
        .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(&up).unwrap();
    let mut ok = [0u8; 2];
    s.read_exact(&mut ok).unwrap();
    sink.join().unwrap();

    std::thread::sleep(Duration::from_millis(150));
    let url = ag.api_url();
    let frames = metric(&url, "sluice_port_rx_packets_total", "port=\"1\"");
    let bytes = metric(&url, "sluice_port_rx_bytes_total", "port=\"1\"");
    // Port 1 receives what VM 1 sends: the upload's 9014-byte frames (about
    // 930 of them) and a handful of small ones.
    assert!(frames >= 900, "{frames} frames");
    assert!(bytes / frames > 8000, "{bytes} bytes in {frames} frames");
    assert_eq!(metric(&url, "sluice_io_rx_truncated_total", "port:1"), 0);
    assert_eq!(metric(&url, "sluice_port_drops_total", ""), 0);
    ag.shutdown();
}
