//! Namespaces, links and addresses made here and read back over netlink. Every
//! namespace is a [`Netns`] (unique name, deleted on drop), so a failing test
//! leaves nothing behind.

use std::net::Ipv4Addr;

use super::*;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn parses_macs_and_cidrs() {
    assert_eq!(
        parse_mac("02:53:4c:00:00:01").unwrap(),
        [2, 0x53, 0x4c, 0, 0, 1]
    );
    for bad in [
        "",
        "02:53:4c:00:00",
        "02:53:4c:00:00:01:02",
        "0g:00:00:00:00:00",
        "002:0:0:0:0:0",
    ] {
        assert!(parse_mac(bad).is_err(), "{bad}");
    }
    assert_eq!(
        parse_cidr("10.0.0.1/24").unwrap(),
        (Ipv4Addr::new(10, 0, 0, 1), 24)
    );
    for bad in ["10.0.0.1", "10.0.0.1/33", "x/24", "10.0.0.1/"] {
        assert!(parse_cidr(bad).is_err(), "{bad}");
    }
}

#[test]
fn bad_names_are_refused() {
    for n in ["", "a/b", "..", "."] {
        assert!(matches!(in_netns(n, || ()), Err(NetnsError::BadName(_))));
        assert!(matches!(create(n), Err(NetnsError::BadName(_))));
        assert!(matches!(delete(n), Err(NetnsError::BadName(_))));
        assert!(!exists(n));
    }
    let e = in_netns("sluice-no-such-netns", || ()).unwrap_err();
    assert!(e.to_string().contains("sluice-no-such-netns"), "{e}");
    assert_eq!(io::Error::from(e).kind(), io::ErrorKind::NotFound);
    assert!(sysctl(None, "net/../x", "1").is_err());
}

#[test]
fn a_namespace_is_created_entered_and_deleted() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let ns = Netns::new("n").unwrap();
    let name = ns.name().to_string();
    assert!(exists(&name));
    assert!(list().contains(&name));
    assert!(matches!(create(&name), Err(NetnsError::Namespace { .. })));
    // A fresh namespace has loopback only, and Netns brought it up.
    let links = ns.rtnl().unwrap().links().unwrap();
    assert_eq!(links.len(), 1, "{links:?}");
    assert!(links[0].up && links[0].name == "lo");
    // Its inode differs from ours: the thread really was inside.
    let inode = |p: &str| std::fs::metadata(p).map(|m| std::os::unix::fs::MetadataExt::ino(&m));
    let inside = ns
        .run(|| inode("/proc/thread-self/ns/net").unwrap())
        .unwrap();
    assert_ne!(inside, inode("/proc/thread-self/ns/net").unwrap());
    // `ip netns` sees it, as the agent's operators expect.
    if let Ok(out) = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
    {
        assert!(String::from_utf8_lossy(&out.stdout).contains(&name));
    }
    drop(ns);
    assert!(!exists(&name));
    assert!(delete(&name).is_err());
}

#[test]
fn a_veth_pair_is_made_addressed_and_read_back() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let a = Netns::new("a").unwrap();
    let b = Netns::new("b").unwrap();
    veth(&a, "va", &b, "vb").unwrap();
    a.addr("va", "10.9.0.1/24").unwrap();
    let ra = a.rtnl().unwrap();
    ra.set_mtu("va", 9000).unwrap();
    ra.set_mac("va", [2, 0, 0, 0, 0, 0x0a]).unwrap();
    let va = ra.link("va").unwrap();
    assert!(va.up);
    assert_eq!(va.mtu, 9000);
    assert_eq!(va.mac, vec![2, 0, 0, 0, 0, 0x0a]);
    assert_eq!(va.kind.as_deref(), Some("veth"));
    assert_eq!(
        ra.addrs("va").unwrap(),
        vec![(Ipv4Addr::new(10, 9, 0, 1), 24)]
    );
    let rb = b.rtnl().unwrap();
    assert!(rb.link("vb").unwrap().up);
    assert!(ra.link("vb").is_err(), "the peer is in the other namespace");

    // Routes and neighbours.
    ra.add_route(&Route {
        dst: (Ipv4Addr::new(10, 8, 0, 0), 16),
        via: Some(Ipv4Addr::new(10, 9, 0, 2)),
        dev: "va".into(),
        onlink: false,
        src: None,
    })
    .unwrap();
    let routes = ra.routes().unwrap();
    assert!(
        routes.contains(&RouteEntry {
            dst: (Ipv4Addr::new(10, 8, 0, 0), 16),
            via: Some(Ipv4Addr::new(10, 9, 0, 2)),
            oif: Some(va.index)
        }),
        "{routes:?}"
    );
    ra.replace_neigh("va", Ipv4Addr::new(10, 9, 0, 2), [2, 0, 0, 0, 0, 0x0b])
        .unwrap();
    ra.replace_neigh("va", Ipv4Addr::new(10, 9, 0, 2), [2, 0, 0, 0, 0, 0x0c])
        .unwrap();

    ra.flush_addrs("va").unwrap();
    assert!(ra.addrs("va").unwrap().is_empty());
    ra.set_up("va", false).unwrap();
    ra.rename("va", "vx").unwrap();
    assert!(!ra.link("vx").unwrap().up);
    ra.del_link("vx").unwrap();
    assert!(rb.link("vb").is_err(), "deleting one end removes the pair");
}

#[test]
fn errors_name_the_namespace_link_and_operation() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let ns = Netns::new("e").unwrap();
    let e = ns.rtnl().unwrap().set_up("nosuchdev", true).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains(ns.name()) && msg.contains("nosuchdev") && msg.contains("set up"),
        "{msg}"
    );
    let e = ns
        .addr("lo", "10.0.0.1/24")
        .and_then(|()| ns.addr("lo", "10.0.0.1/24"));
    assert!(e
        .unwrap_err()
        .to_string()
        .contains("add address 10.0.0.1/24"));
}

#[test]
fn links_move_between_namespaces_and_join_bridges() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let a = Netns::new("m").unwrap();
    let b = Netns::new("m").unwrap();
    let ra = a.rtnl().unwrap();
    ra.add_veth("p0", "p1", None).unwrap();
    ra.move_to("p1", b.name()).unwrap();
    assert!(ra.link("p1").is_err());
    bridge(&b, "br0", &["p1"]).unwrap();
    let rb = b.rtnl().unwrap();
    let br = rb.link("br0").unwrap();
    assert!(br.up);
    assert_eq!(br.kind.as_deref(), Some("bridge"));
    assert_eq!(rb.link("p1").unwrap().master, Some(br.index));
}

#[test]
fn sysctls_are_per_namespace() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let ns = Netns::new("s").unwrap();
    let key = "net.ipv4.ip_forward";
    let ours = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap();
    let flipped = if ours.trim() == "1" { "0" } else { "1" };
    sysctl(Some(ns.name()), key, flipped).unwrap();
    let inside = ns
        .run(|| std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap())
        .unwrap();
    assert_eq!(inside.trim(), flipped);
    assert_eq!(
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap(),
        ours
    );
    let e = sysctl(Some(ns.name()), "net.no.such.knob", "1").unwrap_err();
    assert!(e.to_string().contains("net.no.such.knob"), "{e}");
}

#[test]
fn an_endpoint_is_attached_with_offloads_off() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let host = Netns::new("h").unwrap();
    let vm = Netns::new("v").unwrap();
    let port = unique_name("q");
    let addr = Ipv4Addr::new(10, 7, 0, 1);
    let gw = Ipv4Addr::new(169, 254, 0, 1);
    attach_endpoint(&Endpoint {
        host_ns: host.name(),
        host_iface: &port,
        ns: vm.name(),
        iface: "eth0",
        addrs: &[addr],
        mac: [2, 0, 0, 0, 0, 1],
        gateway: gw,
        gateway_mac: [2, 0x53, 0x4c, 0, 0, 1],
    })
    .unwrap();
    let rv = vm.rtnl().unwrap();
    let eth0 = rv.link("eth0").unwrap();
    assert!(eth0.up);
    assert_eq!(eth0.mac, vec![2, 0, 0, 0, 0, 1]);
    assert_eq!(rv.addrs("eth0").unwrap(), vec![(addr, 32)]);
    assert!(rv.routes().unwrap().contains(&RouteEntry {
        dst: (Ipv4Addr::UNSPECIFIED, 0),
        via: Some(gw),
        oif: Some(eth0.index)
    }));
    let rh = host.rtnl().unwrap();
    assert!(rh.link(&port).unwrap().up);
    assert!(rh.addrs(&port).unwrap().is_empty());
    // What `ethtool -k` reports, where it is installed.
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", vm.name(), "ethtool", "-k", "eth0"])
        .output();
    if let Some(out) = out.ok().filter(|o| o.status.success()) {
        let text = String::from_utf8_lossy(&out.stdout);
        for f in [
            "tx-checksumming",
            "tcp-segmentation-offload",
            "rx-checksumming",
        ] {
            assert!(text.contains(&format!("{f}: off")), "{f} in {text}");
        }
    }
    // A second endpoint with the same host interface fails and leaves the
    // first in place.
    let vm2 = Netns::new("v").unwrap();
    let e = attach_endpoint(&Endpoint {
        host_ns: host.name(),
        host_iface: &port,
        ns: vm2.name(),
        iface: "eth0",
        addrs: &[],
        mac: [2, 0, 0, 0, 0, 2],
        gateway: gw,
        gateway_mac: [2, 0x53, 0x4c, 0, 0, 1],
    });
    assert!(e.is_err());
    assert!(vm2.rtnl().unwrap().link("eth0").is_err());
    assert!(rh.link(&port).is_ok());
}
