//! Two hosts on a fabric bridge exchange a UDP datagram; everything is removed after.

use std::net::UdpSocket;
use std::time::Duration;

use sluice_testbed::{bridge, veth, Netns, NetnsExt};

#[test]
fn hosts_on_a_bridge_talk_and_are_cleaned_up() {
    let fabric = Netns::new("f").unwrap();
    let h1 = Netns::new("h1").unwrap();
    let h2 = Netns::new("h2").unwrap();
    veth(&h1, "eth0", &fabric, "p1").unwrap();
    veth(&h2, "eth0", &fabric, "p2").unwrap();
    bridge(&fabric, "br0", &["p1", "p2"]).unwrap();
    h1.addr("eth0", "172.30.0.1/24").unwrap();
    h2.addr("eth0", "172.30.0.2/24").unwrap();

    let rx = h2
        .run(|| UdpSocket::bind("172.30.0.2:7000").unwrap())
        .unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let tx = h1.run(|| UdpSocket::bind("172.30.0.1:0").unwrap()).unwrap();
    // The first datagram may wait on ARP; the socket keeps its namespace on this thread.
    tx.send_to(b"over the fabric", "172.30.0.2:7000").unwrap();
    let mut buf = [0u8; 64];
    let (n, from) = rx.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"over the fabric");
    assert_eq!(from.ip().to_string(), "172.30.0.1");

    let names: Vec<String> = [&fabric, &h1, &h2]
        .iter()
        .map(|n| n.name().to_string())
        .collect();
    drop((fabric, h1, h2));
    let list = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    for n in names {
        assert!(!list.contains(&n), "namespace {n} left behind");
    }
}

#[test]
fn failures_name_the_command() {
    let ns = Netns::new("e").unwrap();
    let e = ns
        .ip(&["link", "set", "nosuchdev", "up"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("nosuchdev"), "{e}");
}
