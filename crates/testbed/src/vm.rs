//! Attaching a tenant VM (a namespace) to a host's switch port.
//!
//! A VM sees an ordinary Ethernet link: its address as a /32 and a default route
//! through a link-local next hop whose MAC is the switch's router MAC, pinned as a
//! permanent neighbour entry, so the VM never needs ARP to leave. The host side of
//! the link carries no address: the agent reads and writes raw frames on it.
//! Checksum and segmentation offloads are turned off on the VM side so the frames
//! the agent sees are complete and at most MTU-sized, as a physical NIC would
//! deliver them.

use std::net::Ipv4Addr;

use sluice_netns::{attach_endpoint, parse_mac, Endpoint, NetnsError};

use crate::TestbedError;

/// The switch's router MAC: VMs send every frame to it.
pub const ROUTER_MAC: &str = "02:53:4c:00:00:01";
/// The link-local next hop VMs route through.
pub const ROUTER_IP: &str = "169.254.0.1";

/// A VM link as created by [`attach`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmLink {
    /// Host-side interface (the switch port).
    pub port_iface: String,
    /// The VM's MAC.
    pub mac: String,
}

/// Sets a sysctl inside `ns` (best effort: a missing knob is not an error worth
/// failing a testbed for, e.g. IPv6 compiled out).
pub fn sysctl(ns: &str, key: &str, value: &str) {
    let _ = sluice_netns::sysctl(Some(ns), key, value);
}

/// Keeps bridges in `ns` from passing frames through its (empty) iptables,
/// ip6tables and arptables hooks, which the kernel does where
/// `br_netfilter` is loaded: bridges here stand for switches, not firewalls.
pub fn no_bridge_netfilter(ns: &str) {
    for table in ["iptables", "ip6tables", "arptables"] {
        sysctl(ns, &format!("net.bridge.bridge-nf-call-{table}"), "0");
    }
}

/// Connects namespace `vm` (interface `eth0`, `addrs` as /32s, the first one
/// primary) to namespace `host` (interface `port_iface`), with `mac` on the VM
/// side (see [`sluice_netns::attach_endpoint`]).
pub fn attach(
    host: &str,
    port_iface: &str,
    vm: &str,
    addrs: &[String],
    mac: &str,
) -> Result<VmLink, TestbedError> {
    let addrs = addrs
        .iter()
        .map(|a| {
            a.parse::<Ipv4Addr>().map_err(|_| NetnsError::Parse {
                what: "VM address",
                value: a.clone(),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    attach_endpoint(&Endpoint {
        host_ns: host,
        host_iface: port_iface,
        ns: vm,
        iface: "eth0",
        addrs: &addrs,
        mac: parse_mac(mac)?,
        gateway: ROUTER_IP.parse().unwrap_or(Ipv4Addr::new(169, 254, 0, 1)),
        gateway_mac: parse_mac(ROUTER_MAC)?,
    })?;
    Ok(VmLink {
        port_iface: port_iface.to_string(),
        mac: mac.to_string(),
    })
}

/// Turns off checksum and segmentation offloads on `dev` in `ns` (see
/// [`sluice_netns::offloads_off`]).
pub fn offloads_off(ns: &str, dev: &str) -> Result<(), TestbedError> {
    Ok(sluice_netns::offloads_off(Some(ns), dev)?)
}
