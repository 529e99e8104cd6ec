//! The messages exchanged by Sluice's control plane, as plain serde types.
//!
//! Everything travels as JSON over HTTP on the management network (loopback in the
//! testbed):
//!
//! * an agent (`sluiced`) registers its host with the controller
//!   (`POST /v1/hosts`, [`HostRegistration`]) and repeats it as a heartbeat carrying
//!   the version of the configuration it runs;
//! * whoever creates tenant VMs (the testbed, a cloud's compute service) registers
//!   them with the controller (`PUT /v1/vms/{tenant}/{name}`, [`VmRegistration`]);
//! * the controller pushes each host's whole configuration to its agent
//!   (`PUT {api}/v1/config`, [`AgentConfig`]) whenever it changes, and again when a
//!   heartbeat shows the agent runs another version;
//! * the agent reports its counters at `GET {api}/v1/status` ([`AgentStatus`]) and in
//!   Prometheus text format at `GET {api}/metrics`.
//!
//! The agent keeps forwarding with the last configuration it accepted while the
//! controller is unreachable: configuration is state pushed to it, never fetched per
//! packet.

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};
use sluice_switch::{Entry, Group};

/// UDP port of Geneve (RFC 8926), between hosts and between an agent and its
/// NF instances.
pub const GENEVE_PORT: u16 = 6081;

/// A host agent announcing itself (and, repeated, its heartbeat).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostRegistration {
    /// Host id, unique in the fabric.
    pub host: u32,
    /// Human name (the testbed's namespace name, a hostname).
    pub name: String,
    /// Tunnel endpoint address on the fabric.
    pub underlay: Ipv4Addr,
    /// Base URL of the agent's API, e.g. `http://127.0.0.1:7101`.
    pub api: String,
    /// Version of the configuration the agent runs (0: none yet).
    #[serde(default)]
    pub config_version: u64,
}

/// A tenant VM attached to a host's switch (a service VM, or the gateway where
/// external subnets enter).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmRegistration {
    /// Tenant the VM belongs to.
    pub tenant: String,
    /// VM name, as the tenant spec's services (or the gateway) name it.
    pub name: String,
    /// Host it runs on.
    pub host: u32,
    /// Host-side interface of the VM's link (the switch port).
    pub iface: String,
    /// The VM's MAC address (frames delivered to it carry it).
    pub mac: String,
    /// The VM's address (for the gateway: any address it uses).
    pub addr: std::net::IpAddr,
    /// This VM is the tenant's gateway to its external subnets.
    #[serde(default)]
    pub gateway: bool,
}

/// One host's whole configuration, replaced atomically by the agent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentConfig {
    /// Increases with every change the controller makes for this host.
    pub version: u64,
    /// The host this configuration is for.
    pub host: u32,
    /// Every host of the fabric (this one included) and its tunnel endpoint.
    pub peers: Vec<Peer>,
    /// This host's switch ports.
    pub ports: Vec<PortConfig>,
    /// Per tenant, this host's share of its switch.
    pub tenants: Vec<TenantFib>,
    /// NF instances this host must run (one per [`PortKind::Instance`] port).
    pub instances: Vec<InstanceConfig>,
}

/// A host and its tunnel endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peer {
    /// Host id.
    pub host: u32,
    /// Fabric address.
    pub underlay: Ipv4Addr,
}

/// A port of the host's switch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortConfig {
    /// Port id, unique on the host (what FIB entries name).
    pub id: u16,
    /// Tenant (VNI) of everything entering through the port.
    pub vni: u32,
    /// What is attached.
    pub kind: PortKind,
}

/// What a port attaches to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PortKind {
    /// A VM's link: raw Ethernet frames on a local interface.
    Vm {
        /// VM name.
        name: String,
        /// Host-side interface.
        iface: String,
        /// The VM's MAC.
        mac: String,
    },
    /// An NF instance, reached by Geneve over UDP on a point-to-point link whose
    /// addresses [`instance_link`] derives from the port id.
    Instance {
        /// Instance name (`tenant/middlebox/k`).
        name: String,
    },
}

/// One tenant's FIB share on a host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TenantFib {
    /// Tenant name.
    pub tenant: String,
    /// Its VNI.
    pub vni: u32,
    /// Entries.
    pub entries: Vec<Entry>,
    /// Groups `(id, group)` the entries select from.
    pub groups: Vec<(u32, Group)>,
}

/// An NF instance to run on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceConfig {
    /// `tenant/middlebox/k`.
    pub name: String,
    /// Tenant.
    pub tenant: String,
    /// Middlebox (element name in the tenant spec).
    pub middlebox: String,
    /// The switch port it is attached to.
    pub port: u16,
    /// Tenant VNI.
    pub vni: u32,
    /// The chain it runs, as chain YAML (`sluice_chain`'s format; rules inline).
    pub chain_yaml: String,
    /// State backend: `local`, `redis://HOST:PORT` or `redis-cluster://HOST:PORT,...`.
    pub state: String,
}

/// Packet counters of one port (or of the fabric).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Packets received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets dropped (no FIB match, FIB drop, malformed, queue full).
    pub drops: u64,
}

/// One port's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortStatus {
    /// Port id.
    pub id: u16,
    /// VM or instance name.
    pub name: String,
    /// Counters.
    pub counters: Counters,
}

/// One NF instance as its agent sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceStatus {
    /// `tenant/middlebox/k`.
    pub name: String,
    /// Port id.
    pub port: u16,
    /// Process id, if running.
    pub pid: Option<u32>,
    /// The process is running.
    pub alive: bool,
}

/// What `GET /v1/status` on an agent returns.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentStatus {
    /// Host id.
    pub host: u32,
    /// Version of the running configuration (0: none).
    pub config_version: u64,
    /// Milliseconds since the controller was last heard from (None: never).
    pub controller_silent_ms: Option<u64>,
    /// Per-port counters.
    pub ports: Vec<PortStatus>,
    /// Fabric (tunnel) counters.
    pub fabric: Counters,
    /// NF instances.
    pub instances: Vec<InstanceStatus>,
}

/// The point-to-point link of instance port `port`: `(agent side, instance side)`
/// addresses, each in its own /30 of 169.254.0.0/16 (link-local: never routed off
/// the host). Ports 1..=16383 have a link.
pub fn instance_link(port: u16) -> Option<(Ipv4Addr, Ipv4Addr)> {
    if port == 0 || port > 16383 {
        return None;
    }
    let base = (169u32 << 24) | (254 << 16) | ((port as u32) << 2);
    Some((Ipv4Addr::from(base + 1), Ipv4Addr::from(base + 2)))
}

/// Prefix length of an instance link.
pub const INSTANCE_LINK_PREFIX: u8 = 30;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_links_are_disjoint_30s() {
        let (a1, i1) = instance_link(1).unwrap();
        assert_eq!(a1, Ipv4Addr::new(169, 254, 0, 5));
        assert_eq!(i1, Ipv4Addr::new(169, 254, 0, 6));
        let (a, i) = instance_link(16383).unwrap();
        assert_eq!(a, Ipv4Addr::new(169, 254, 255, 253));
        assert_eq!(i, Ipv4Addr::new(169, 254, 255, 254));
        assert!(instance_link(0).is_none());
        assert!(instance_link(16384).is_none());
        for p in 1..200u16 {
            let (a, _) = instance_link(p).unwrap();
            let (b, _) = instance_link(p + 1).unwrap();
            assert_eq!(u32::from(b) - u32::from(a), 4);
        }
    }

    #[test]
    fn config_round_trips_as_json() {
        let c = AgentConfig {
            version: 3,
            host: 1,
            peers: vec![Peer {
                host: 1,
                underlay: Ipv4Addr::new(10, 255, 0, 1),
            }],
            ports: vec![
                PortConfig {
                    id: 1,
                    vni: 7,
                    kind: PortKind::Vm {
                        name: "web-a1".into(),
                        iface: "p1".into(),
                        mac: "02:00:00:00:00:01".into(),
                    },
                },
                PortConfig {
                    id: 2,
                    vni: 7,
                    kind: PortKind::Instance {
                        name: "acme/fw/0".into(),
                    },
                },
            ],
            tenants: vec![],
            instances: vec![],
        };
        let j = serde_json::to_string(&c).unwrap();
        assert!(j.contains("\"type\":\"vm\""), "{j}");
        let back: AgentConfig = serde_json::from_str(&j).unwrap();
        assert_eq!(back, c);
    }
}
