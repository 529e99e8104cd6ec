//! Attaching a tenant VM (a namespace) to a host's switch port.
//!
//! A VM sees an ordinary Ethernet link: its address as a /32 and a default route
//! through a link-local next hop whose MAC is the switch's router MAC, pinned as a
//! permanent neighbour entry, so the VM never needs ARP to leave. The host side of
//! the link carries no address: the agent reads and writes raw frames on it.
//! Checksum and segmentation offloads are turned off on the VM side so the frames
//! the agent sees are complete and at most MTU-sized, as a physical NIC would
//! deliver them.

use std::process::Command;

use crate::{ip, Netns, TestbedError};

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
    let _ = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "sysctl",
            "-qw",
            &format!("{key}={value}"),
        ])
        .output();
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
/// primary) to namespace `host` (interface `port_iface`), with `mac` on the VM side.
pub fn attach(
    host: &str,
    port_iface: &str,
    vm: &str,
    addrs: &[String],
    mac: &str,
) -> Result<VmLink, TestbedError> {
    let tmp = crate::unique_name("t");
    ip(&[
        "link", "add", &tmp, "type", "veth", "peer", "name", port_iface,
    ])?;
    let r = (|| {
        ip(&["link", "set", port_iface, "netns", host])?;
        ip(&["link", "set", &tmp, "netns", vm])?;
        ip(&["-n", vm, "link", "set", &tmp, "name", "eth0"])?;
        ip(&["-n", vm, "link", "set", "eth0", "address", mac])?;
        sysctl(vm, "net.ipv6.conf.all.disable_ipv6", "1");
        sysctl(
            host,
            &format!("net.ipv6.conf.{port_iface}.disable_ipv6"),
            "1",
        );
        for a in addrs {
            ip(&["-n", vm, "addr", "add", &format!("{a}/32"), "dev", "eth0"])?;
        }
        ip(&["-n", vm, "link", "set", "eth0", "up"])?;
        ip(&["-n", vm, "link", "set", "lo", "up"])?;
        ip(&["-n", host, "link", "set", port_iface, "up"])?;
        ip(&[
            "-n",
            vm,
            "neigh",
            "replace",
            ROUTER_IP,
            "lladdr",
            ROUTER_MAC,
            "dev",
            "eth0",
            "nud",
            "permanent",
        ])?;
        let src = addrs.first().map(String::as_str).unwrap_or("");
        let mut route = vec![
            "-n", vm, "route", "add", "default", "via", ROUTER_IP, "dev", "eth0", "onlink",
        ];
        if !src.is_empty() {
            route.extend_from_slice(&["src", src]);
        }
        ip(&route)?;
        offloads_off(vm, "eth0")?;
        offloads_off(host, port_iface)
    })();
    if r.is_err() {
        let _ = ip(&["-n", host, "link", "del", port_iface]);
        let _ = ip(&["link", "del", &tmp]);
    }
    r.map(|_| VmLink {
        port_iface: port_iface.to_string(),
        mac: mac.to_string(),
    })
}

/// Turns off checksum and segmentation offloads on `dev` in `ns`.
pub fn offloads_off(ns: &str, dev: &str) -> Result<(), TestbedError> {
    let out = Command::new("ip")
        .args([
            "netns", "exec", ns, "ethtool", "-K", dev, "tx", "off", "rx", "off", "tso", "off",
            "gso", "off", "gro", "off",
        ])
        .output()
        .map_err(|e| TestbedError::Sys {
            what: "run ethtool (Debian package ethtool)".into(),
            err: e,
        })?;
    // ethtool exits non-zero when one feature cannot change (e.g. "gro" fixed);
    // what matters is that checksumming and TSO are off, which it reports then.
    if !out.status.success() {
        let check = Command::new("ip")
            .args(["netns", "exec", ns, "ethtool", "-k", dev])
            .output()
            .map_err(|e| TestbedError::Sys {
                what: "run ethtool -k".into(),
                err: e,
            })?;
        let text = String::from_utf8_lossy(&check.stdout);
        let on = |feature: &str| {
            text.lines()
                .any(|l| l.trim_start().starts_with(feature) && l.contains(": on"))
        };
        if on("tx-checksumming") || on("tcp-segmentation-offload") {
            return Err(TestbedError::Command {
                cmd: format!("ethtool -K {dev} tx off tso off (in {ns})"),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
    }
    Ok(())
}

impl Netns {
    /// Creates a namespace with exactly this name (loopback up), deleted on drop
    /// unless [`Netns::keep`] is called.
    pub fn create(name: &str) -> Result<Netns, TestbedError> {
        ip(&["netns", "add", name])?;
        let ns = Netns {
            name: name.to_string(),
        };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Disarms the drop: the namespace outlives this handle (the caller records
    /// its name to delete it later).
    pub fn keep(self) -> String {
        let name = self.name.clone();
        std::mem::forget(self);
        name
    }
}
