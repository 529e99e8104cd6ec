//! Shapes built from the primitives: veth pairs between namespaces, bridges, and
//! an endpoint (a VM or an NF instance) hanging off a host namespace.

use std::net::Ipv4Addr;

use crate::{offloads_off, sysctl, Netns, NetnsError, Route, Rtnl};

/// Creates a veth pair with one end (`a`) in `ns_a` and the other (`b`) in `ns_b`,
/// both up. Deleting either namespace removes the pair.
pub fn veth(ns_a: &Netns, a: &str, ns_b: &Netns, b: &str) -> Result<(), NetnsError> {
    let ra = ns_a.rtnl()?;
    ra.add_veth(a, b, Some(ns_b.name()))?;
    let r = (|| {
        ra.set_up(a, true)?;
        ns_b.rtnl()?.set_up(b, true)
    })();
    if r.is_err() {
        let _ = ra.del_link(a);
    }
    r
}

/// Creates a bridge `name` in `ns`, up, and attaches `ports` (interfaces in `ns`).
pub fn bridge(ns: &Netns, name: &str, ports: &[&str]) -> Result<(), NetnsError> {
    let rt = ns.rtnl()?;
    rt.add_bridge(name)?;
    rt.set_up(name, true)?;
    for p in ports {
        rt.set_master(p, name)?;
    }
    Ok(())
}

/// An endpoint (a VM, say) to connect to a host namespace with [`attach_endpoint`].
#[derive(Debug, Clone)]
pub struct Endpoint<'a> {
    /// The host namespace.
    pub host_ns: &'a str,
    /// The host side of the link (no address, up), in `host_ns`.
    pub host_iface: &'a str,
    /// The endpoint's namespace (must exist).
    pub ns: &'a str,
    /// The endpoint side of the link, in `ns`.
    pub iface: &'a str,
    /// The endpoint's addresses, each a /32; the first is the source of its
    /// default route.
    pub addrs: &'a [Ipv4Addr],
    /// The endpoint's MAC.
    pub mac: [u8; 6],
    /// The next hop of the endpoint's default route (on-link).
    pub gateway: Ipv4Addr,
    /// The gateway's MAC, pinned as a permanent neighbour so the endpoint never
    /// needs ARP to leave.
    pub gateway_mac: [u8; 6],
}

/// Connects `e.ns` to `e.host_ns` with a veth pair: the endpoint side holds its
/// MAC, its addresses as /32s and a default route through the pinned gateway;
/// the host side carries no address. IPv6 is off on both and checksum and
/// segmentation offloads are off on both ends (see [`offloads_off`]), so a
/// reader of the host side sees complete, MTU-sized frames, as a physical NIC
/// would deliver them. On failure the link is removed again.
pub fn attach_endpoint(e: &Endpoint<'_>) -> Result<(), NetnsError> {
    let inner = Rtnl::open(Some(e.ns))?;
    inner.add_veth(e.iface, e.host_iface, Some(e.host_ns))?;
    let r = (|| {
        let host = Rtnl::open(Some(e.host_ns))?;
        inner.set_mac(e.iface, e.mac)?;
        // Best effort, as before: a kernel without IPv6 has no such knobs, and
        // no IPv6 is as good as IPv6 off.
        let _ = sysctl(Some(e.ns), "net.ipv6.conf.all.disable_ipv6", "1");
        let key = format!("net.ipv6.conf.{}.disable_ipv6", e.host_iface);
        let _ = sysctl(Some(e.host_ns), &key, "1");
        for a in e.addrs {
            inner.add_addr(e.iface, *a, 32)?;
        }
        inner.set_up(e.iface, true)?;
        inner.set_up("lo", true)?;
        host.set_up(e.host_iface, true)?;
        inner.replace_neigh(e.iface, e.gateway, e.gateway_mac)?;
        inner.add_route(&Route {
            dst: (Ipv4Addr::UNSPECIFIED, 0),
            via: Some(e.gateway),
            dev: e.iface.to_string(),
            onlink: true,
            src: e.addrs.first().copied(),
        })?;
        offloads_off(Some(e.ns), e.iface)?;
        offloads_off(Some(e.host_ns), e.host_iface)
    })();
    if r.is_err() {
        let _ = inner.del_link(e.iface);
    }
    r
}
