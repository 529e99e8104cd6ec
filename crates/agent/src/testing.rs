//! Helpers for tests and the testbed: a tenant VM (a namespace) attached to a
//! host namespace the way the agent expects it.
//!
//! [`attach_vm`] creates a namespace for the VM with `eth0` holding its address
//! as a /32, a default route via 169.254.0.1 (onlink) whose neighbour entry is
//! pinned to the router MAC, IPv6 off and checksum/segmentation offloads off (so
//! the agent sees complete, MTU-sized frames), and the host side of the veth
//! (no address, up) in the host namespace. Put the returned
//! [`VmHandle::port_kind`] in an [`sluice_proto::AgentConfig`] port to forward for it.

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, Ordering};

use sluice_netns::{attach_endpoint, Endpoint, Netns, NetnsError};
use sluice_switch::{Action, Entry, Match, Output, Prefix};

use crate::{Agent, AgentError, AgentOptions, ROUTER_MAC};

/// True when running as root (the namespace tests skip otherwise).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The fabric address the two-host tests give host `h`: 10.255.0.h.
pub fn underlay(h: u32) -> Ipv4Addr {
    Ipv4Addr::new(10, 255, 0, h as u8)
}

/// Two host namespaces joined by a fabric link `fab0` (MTU 9000), host 1 and
/// host 2 at their [`underlay`] addresses.
pub fn two_hosts() -> Result<(Netns, Netns), NetnsError> {
    let h1 = Netns::new("h")?;
    let h2 = Netns::new("h")?;
    sluice_netns::veth(&h1, "fab0", &h2, "fab0")?;
    for (ns, h) in [(&h1, 1), (&h2, 2)] {
        ns.rtnl()?.set_mtu("fab0", 9000)?;
        ns.addr("fab0", &format!("{}/24", underlay(h)))?;
    }
    Ok((h1, h2))
}

/// The options of an agent for host `h` with its data plane in namespace
/// `netns` and no controller (its configuration is put on its API): API on
/// loopback, Geneve on the standard port, no run directory, no NF instance
/// executable. Tests change what they need with struct update syntax.
pub fn standalone_options(h: u32, netns: &str) -> AgentOptions {
    AgentOptions {
        host: h,
        name: format!("h{h}"),
        netns: Some(netns.to_string()),
        underlay: underlay(h),
        controller: None,
        controller_token: None,
        controller_tls: None,
        api_token: None,
        listen: "127.0.0.1:0".into(),
        prefix: "t".into(),
        run_dir: None,
        udp: std::net::SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, sluice_proto::GENEVE_PORT),
        instance_exe: None,
        suspect_after: None,
        seawall: None,
        vm_mtu: None,
        capacity: None,
        api_tls: false,
        siem: None,
        dataplane_threads: 1,
    }
}

/// An agent for host `h` with its data plane in `ns` and no controller (its
/// configuration is put on its API), Geneve on the standard port.
pub fn standalone_agent(h: u32, ns: &Netns) -> Result<Agent, AgentError> {
    Agent::start(&standalone_options(h, ns.name()))
}

/// `GET /v1/status` of the agent at `url` (panics on failure: for tests).
pub fn agent_status(url: &str) -> sluice_proto::AgentStatus {
    ureq::get(&format!("{url}/v1/status"))
        .call()
        .expect("the agent answers /v1/status")
        .into_json()
        .expect("/v1/status is an AgentStatus")
}

/// The agent's status once `ready` holds of it, or the last one read after
/// five seconds: counters are published periodically
/// ([`crate::io::PUBLISH_EVERY`]), so a test that has just seen traffic may
/// read a status from before it.
pub fn agent_status_when(
    url: &str,
    ready: impl Fn(&sluice_proto::AgentStatus) -> bool,
) -> sluice_proto::AgentStatus {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let s = agent_status(url);
        if ready(&s) || std::time::Instant::now() >= deadline {
            return s;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// A FIB entry sending traffic to `dst` (a /32) to `out`.
pub fn host_route(id: u64, dst: Ipv4Addr, out: Output) -> Entry {
    Entry {
        id,
        priority: 10,
        m: Match {
            dst: Some(Prefix::parse(&format!("{dst}/32")).expect("a /32 parses")),
            ..Match::default()
        },
        actions: vec![Action::Output(out)],
    }
}

/// A VM namespace attached to a host; the namespace (and the link) is deleted
/// when the handle is dropped.
#[derive(Debug)]
pub struct VmHandle {
    /// The VM's namespace.
    pub ns: Netns,
    /// The VM's name.
    pub name: String,
    /// Host-side interface (the switch port).
    pub iface: String,
    /// The VM's MAC.
    pub mac: String,
    /// The VM's address.
    pub addr: Ipv4Addr,
}

impl VmHandle {
    /// The port kind for an agent configuration.
    pub fn port_kind(&self) -> sluice_proto::PortKind {
        sluice_proto::PortKind::Vm {
            name: self.name.clone(),
            iface: self.iface.clone(),
            mac: self.mac.clone(),
            weight: 1,
        }
    }
}

/// The link-local next hop VMs route through; its neighbour entry is pinned to
/// [`ROUTER_MAC`], the switch's router MAC.
pub const ROUTER_IP: Ipv4Addr = Ipv4Addr::new(169, 254, 0, 1);

static NEXT_MAC: AtomicU32 = AtomicU32::new(1);

/// Creates VM `name` with address `addr` and attaches it to namespace `host_ns`
/// (host-side interface name unique, at most 15 bytes).
pub fn attach_vm(host_ns: &str, name: &str, addr: Ipv4Addr) -> Result<VmHandle, NetnsError> {
    let ns = Netns::new("v")?;
    let n = NEXT_MAC.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    let mac_bytes = [
        2,
        (pid >> 8) as u8,
        pid as u8,
        (n >> 16) as u8,
        (n >> 8) as u8,
        n as u8,
    ];
    let iface = sluice_netns::unique_name("q");
    attach_endpoint(&Endpoint {
        host_ns,
        host_iface: &iface,
        ns: ns.name(),
        iface: "eth0",
        addrs: &[addr],
        mac: mac_bytes,
        gateway: ROUTER_IP,
        gateway_mac: ROUTER_MAC,
    })?;
    let mac = sluice_netns::fmt_mac(&mac_bytes);
    Ok(VmHandle {
        ns,
        name: name.to_string(),
        iface,
        mac,
        addr,
    })
}

/// The configuration of host 1 running one NF instance between two VMs of
/// tenant `t` (VNI 7) on ports 1 and 2 (10.0.0.1 and 10.0.0.2): traffic to
/// either VM goes through `instance` on its port (chain 1 towards `vm2`, chain
/// 2 back), then on to the other VM.
pub fn one_instance_between(
    vm1: &VmHandle,
    vm2: &VmHandle,
    instance: sluice_proto::InstanceConfig,
) -> sluice_proto::AgentConfig {
    use sluice_proto::{AgentConfig, PortConfig, PortKind, TenantFib};
    use sluice_switch::PortId;
    let nf = instance.port;
    let entry = |id, m, actions| Entry {
        id,
        priority: 10,
        m,
        actions,
    };
    let via = |id, from: u16, dst: &str, chain| {
        entry(
            id,
            Match {
                in_port: Some(PortId(from)),
                dst: Some(Prefix::parse(dst).expect("a test prefix")),
                ..Match::default()
            },
            vec![
                Action::SetChainHop { chain, hop: 1 },
                Action::Output(Output::Port(PortId(nf))),
            ],
        )
    };
    let from = |id, chain, to: u16| {
        entry(
            id,
            Match {
                in_port: Some(PortId(nf)),
                chain_hop: Some((chain, 1)),
                ..Match::default()
            },
            vec![Action::Output(Output::Port(PortId(to)))],
        )
    };
    let port = |id, kind| PortConfig { id, vni: 7, kind };
    AgentConfig {
        pardons: Vec::new(),
        health_checks: Vec::new(),
        version: 1,
        host: 1,
        peers: vec![],
        ports: vec![
            port(1, vm1.port_kind()),
            port(2, vm2.port_kind()),
            port(
                nf,
                PortKind::Instance {
                    name: instance.name.clone(),
                },
            ),
        ],
        tenants: vec![TenantFib {
            tenant: "t".into(),
            vni: 7,
            entries: vec![
                via(1, 1, "10.0.0.2/32", 1),
                via(2, 2, "10.0.0.1/32", 2),
                from(3, 1, 2),
                from(4, 2, 1),
            ],
            groups: vec![],
            senders: None,
            sources: None,
            chains: Vec::new(),
        }],
        instances: vec![instance],
        group_policies: vec![],
        fabric_auth: None,
    }
}
