//! Bulk TCP through the agents' batched I/O (needs root): frames read in place
//! from VM ports' receive rings, UDP super-datagrams over the fabric, TCP
//! super-frames delivered to VMs. A transfer of many megabytes in both
//! directions must arrive intact, and the metrics must show that each of those
//! paths was taken (so a silent fallback to one frame per system call is caught).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use sluice_agent::testing::{
    attach_vm, host_route, is_root, standalone_agent, two_hosts, underlay, VmHandle,
};
use sluice_netns::Netns;
use sluice_proto::{AgentConfig, Peer, PortConfig, TenantFib};
use sluice_switch::{Entry, HostId, Output, PortId};

fn config(h: u32, ports: &[(u16, &VmHandle)], entries: Vec<Entry>) -> AgentConfig {
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
        ports: ports
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
            entries,
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

/// Deterministic, non-repeating bytes (xorshift), so a lost, duplicated or
/// reordered segment shows.
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

/// Sends `up` from `client` to `server`'s echo-less sink at `to`, which sends
/// `down` back after reading everything; both sides compare.
fn transfer(client: &VmHandle, server: &VmHandle, to: SocketAddr, up: Vec<u8>, down: Vec<u8>) {
    let listener = server
        .ns
        .run(move || TcpListener::bind(to))
        .unwrap()
        .unwrap();
    let want_up = up.clone();
    let down2 = down.clone();
    let sink = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut got = vec![0u8; want_up.len()];
        s.read_exact(&mut got).unwrap();
        assert!(got == want_up, "client -> server bytes differ");
        s.write_all(&down2).unwrap();
    });
    let mut s = client
        .ns
        .run(move || TcpStream::connect_timeout(&to, Duration::from_secs(10)))
        .unwrap()
        .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(&up).unwrap();
    let mut back = vec![0u8; down.len()];
    s.read_exact(&mut back).unwrap();
    assert!(back == down, "server -> client bytes differ");
    sink.join().unwrap();
}

/// The sum of a metric over its label sets (0 if absent).
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

/// Waits for the counters to be published (every 50 ms).
fn settle() {
    std::thread::sleep(Duration::from_millis(150));
}

#[test]
fn megabytes_cross_two_hosts_intact_in_batches_and_super_frames() {
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
    let cfg1 = config(
        1,
        &[(1, &vm1)],
        vec![
            host_route(1, a1, Output::Port(PortId(1))),
            host_route(2, a2, Output::Host(HostId(2))),
        ],
    );
    let cfg2 = config(
        2,
        &[(1, &vm2)],
        vec![
            host_route(1, a2, Output::Port(PortId(1))),
            host_route(2, a1, Output::Host(HostId(1))),
        ],
    );
    for (ag, cfg) in [(&ag1, cfg1), (&ag2, cfg2)] {
        let r = ureq::put(&format!("{}/v1/config", ag.api_url())).send_json(cfg);
        assert_eq!(r.map(|r| r.status()).ok(), Some(200));
    }
    transfer(
        &vm1,
        &vm2,
        SocketAddr::from((a2, 5001)),
        pattern(1, 24 << 20),
        pattern(2, 8 << 20),
    );
    settle();
    let (u1, u2) = (ag1.api_url(), ag2.api_url());
    // VM ports read through their rings, in batches.
    let batches = metric(&u1, "sluice_io_rx_batches_total", "socket=\"port:1\"");
    let frames = metric(&u1, "sluice_io_rx_frames_total", "socket=\"port:1\"");
    assert!(
        frames > 10_000 && batches < frames,
        "{batches} batches, {frames} frames"
    );
    // Super-datagrams on the fabric, split back on the other side.
    assert!(metric(&u1, "sluice_io_tx_gso_total", "geneve") > 100);
    assert!(metric(&u2, "sluice_io_rx_gro_total", "geneve") > 100);
    // TCP super-frames into the receiving VM, and no checksum trouble.
    assert!(metric(&u2, "sluice_io_gro_super_frames_total", "") > 100);
    assert!(metric(&u2, "sluice_io_gro_merged_total", "") > 1_000);
    assert_eq!(metric(&u2, "sluice_io_gro_bad_csum_total", ""), 0);
    assert_eq!(metric(&u2, "sluice_io_tx_errors_total", ""), 0);
    ag1.shutdown();
    ag2.shutdown();
}

#[test]
fn megabytes_between_vms_of_one_host_intact() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let h = Netns::new("h").unwrap();
    let (a1, a2) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let vm1 = attach_vm(h.name(), "vm1", a1).unwrap();
    let vm2 = attach_vm(h.name(), "vm2", a2).unwrap();
    let ag = standalone_agent(1, &h).unwrap();
    let cfg = config(
        1,
        &[(1, &vm1), (2, &vm2)],
        vec![
            host_route(1, a1, Output::Port(PortId(1))),
            host_route(2, a2, Output::Port(PortId(2))),
        ],
    );
    let r = ureq::put(&format!("{}/v1/config", ag.api_url())).send_json(cfg);
    assert_eq!(r.map(|r| r.status()).ok(), Some(200));
    // Port to port: frames read from one ring are coalesced into the other VM.
    transfer(
        &vm1,
        &vm2,
        SocketAddr::from((a2, 5002)),
        pattern(3, 16 << 20),
        pattern(4, 16 << 20),
    );
    settle();
    let u = ag.api_url();
    assert!(metric(&u, "sluice_io_gro_super_frames_total", "") > 100);
    assert_eq!(metric(&u, "sluice_io_gro_bad_csum_total", ""), 0);
    ag.shutdown();
}
