//! A configuration turned into the data plane's lookup structures: its ports,
//! peers and FIBs, checked whole ([`Dataplane::new`] refuses a configuration
//! any part of which cannot be installed).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};

use sluice_proto::{AgentConfig, PortKind, GENEVE_PORT};
use sluice_switch::{Action, Fib, GroupId};

use super::forward::Lookup;
use super::health::Health;
use super::leases::Leases;
use super::seal::FabricSeal;
use super::seawall::SeawallAdapter;
use super::selection::Selection;
use super::shard::ShardRole;
use super::stats::Stats;
use super::Dataplane;
use crate::groups::GroupSel;
use crate::meter::ChainMeter;

/// A configuration the agent cannot run, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The configuration is for another host.
    #[error("configuration is for host {got}, this agent is host {want}")]
    WrongHost {
        /// Host the config names.
        got: u32,
        /// This agent's host id.
        want: u32,
    },
    /// Two ports share an id.
    #[error("port id {0} is used twice")]
    DuplicatePort(u16),
    /// Two VM ports share an interface.
    #[error("interface {0} is used by two ports")]
    DuplicateIface(String),
    /// A VM port's interface name is not a valid Linux interface name.
    #[error("port {port}: bad interface name {iface:?} (1 to 15 bytes, no '/' or spaces)")]
    BadIface {
        /// Port id.
        port: u16,
        /// The name.
        iface: String,
    },
    /// A VM port's MAC does not parse.
    #[error("port {port}: bad MAC address {mac:?}")]
    BadMac {
        /// Port id.
        port: u16,
        /// The text.
        mac: String,
    },
    /// An instance port's id has no instance link (0 or above 16383).
    #[error("instance port {0} has no instance link (ids 1..=16383)")]
    NoInstanceLink(u16),
    /// A tenant's FIB was refused.
    #[error("tenant {tenant} (vni {vni}): {err}")]
    Fib {
        /// Tenant.
        tenant: String,
        /// VNI.
        vni: u32,
        /// Why.
        err: sluice_switch::FibError,
    },
    /// Two tenants share a VNI.
    #[error("vni {0} is used by two tenants")]
    DuplicateVni(u32),
    /// VNIs are 24 bits.
    #[error("vni {0} does not fit in 24 bits")]
    VniTooLarge(u32),
    /// Two peers share a host id or an underlay address.
    #[error("peer {0} is listed twice (host id or underlay address)")]
    DuplicatePeer(u32),
    /// A fabric key is not 32 bytes of hex.
    #[error("fabric key {id} of peer {peer} is not 64 hex digits")]
    BadKey {
        /// Peer host.
        peer: u32,
        /// Key id.
        id: u8,
    },
    /// A peer's receive keys are not one or two.
    #[error("peer {0} must have one or two receive keys")]
    ReceiveKeys(u32),
    /// An instance names a port that is not an instance port.
    #[error("instance {name}: port {port} is not an instance port of the config")]
    InstancePort {
        /// Instance name.
        name: String,
        /// Port id.
        port: u16,
    },
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut mac {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// True if `name` can be a Linux interface name.
pub fn valid_iface(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 15
        && name != "."
        && name != ".."
        && !name
            .bytes()
            .any(|b| b == b'/' || b == b':' || b.is_ascii_whitespace() || b == 0)
}

/// What is behind a port of this host's switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortTarget {
    /// A VM: raw frames on a local interface.
    Vm {
        /// Host-side interface.
        iface: String,
        /// The VM's MAC (destination of delivered frames).
        mac: [u8; 6],
    },
    /// An NF instance: Geneve to its link address.
    Instance {
        /// Where the instance listens (`instance side:6081`).
        addr: SocketAddrV4,
    },
}

/// One port of the switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    /// Port id.
    pub id: u16,
    /// Tenant (VNI) of everything entering through the port.
    pub vni: u32,
    /// VM or instance name.
    pub name: String,
    /// What is attached.
    pub target: PortTarget,
    /// Seawall weight of what it sends (VMs: their service's `weight:`).
    pub weight: u16,
}

/// Who sent a UDP datagram, by its source address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The NF instance of this port.
    Instance(u16),
    /// A fabric peer.
    Peer(u32),
}

/// A source address the UDP socket may hear from: who sends from it and, for
/// a peer, where its allowed VNIs are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Sender {
    /// Who.
    pub(super) source: Source,
    /// A peer's index in [`Topology::peer_vnis`] (unused for instances).
    slot: u32,
}

/// A tenant (VNI) and the inner source addresses (sorted) a peer may send
/// its packets from.
type VniSources = (u32, Box<[IpAddr]>);

/// Who is where on this host's switch: what forwarding reads and never
/// changes between configurations.
#[derive(Debug)]
pub(super) struct Topology {
    /// This host's id.
    pub(super) host: u32,
    /// Version of the configuration.
    pub(super) version: u64,
    /// The switch's ports, by id.
    pub(super) ports: BTreeMap<u16, Port>,
    /// Fabric peers' Geneve addresses, by host id.
    pub(super) peers: HashMap<u32, SocketAddrV4>,
    /// Who sends from each address the UDP socket may hear from.
    pub(super) sources: HashMap<Ipv4Addr, Sender>,
    /// Per peer (by [`Sender`] slot), the VNIs it may send to this host,
    /// sorted: the tenants that have a VM or an NF instance on it. Built once
    /// per configuration so the per-packet check is a binary search in a few
    /// words.
    peer_vnis: Vec<Box<[u32]>>,
    /// Per peer (by [`Sender`] slot), the tenants whose packets it may send
    /// only from its VMs' addresses: (VNI, those addresses sorted), sorted by
    /// VNI. A VNI not listed: any source.
    peer_sources: Vec<Box<[VniSources]>>,
    /// Operators' releases: per host, how many there were
    /// ([`sluice_proto::AgentConfig::pardons`]).
    pub(super) pardons: BTreeMap<u32, u64>,
}

impl Dataplane {
    /// Builds the state of `cfg` for host `host`; refuses the whole configuration
    /// if any part of it cannot be installed.
    pub fn new(host: u32, cfg: &AgentConfig) -> Result<Dataplane, ConfigError> {
        if cfg.host != host {
            return Err(ConfigError::WrongHost {
                got: cfg.host,
                want: host,
            });
        }
        let mut fibs = HashMap::new();
        let mut groups = HashMap::new();
        let mut entry_group = HashMap::new();
        for t in &cfg.tenants {
            for e in &t.entries {
                // The last action that sets the output decides.
                let last = e.actions.iter().rev().find_map(|a| match a {
                    Action::Output(_) => Some(None),
                    Action::Select(g) => Some(Some(g.0)),
                    _ => None,
                });
                if let Some(Some(g)) = last {
                    entry_group.insert((t.vni, e.id), g);
                }
            }
            for (id, g) in &t.groups {
                let pol = cfg
                    .group_policies
                    .iter()
                    .find(|p| p.vni == t.vni && p.group == *id);
                let mut sel = GroupSel::new(
                    g.clone(),
                    pol.is_some_and(|p| p.pinned),
                    pol.map(|p| p.draining.clone()).unwrap_or_default(),
                );
                sel.local_state = pol.is_some_and(|p| p.local_state);
                sel.lease_epoch = pol.map_or(0, |p| p.lease_epoch);
                groups.insert((t.vni, *id), sel);
            }
            if t.vni >= 1 << 24 {
                return Err(ConfigError::VniTooLarge(t.vni));
            }
            let groups: BTreeMap<GroupId, sluice_switch::Group> = t
                .groups
                .iter()
                .map(|(id, g)| (GroupId(*id), g.clone()))
                .collect();
            let mut fib = Fib::new();
            fib.replace(t.entries.clone(), groups, cfg.version)
                .map_err(|err| ConfigError::Fib {
                    tenant: t.tenant.clone(),
                    vni: t.vni,
                    err,
                })?;
            if fibs.insert(t.vni, fib).is_some() {
                return Err(ConfigError::DuplicateVni(t.vni));
            }
        }
        let topo = Topology::new(host, cfg)?;
        let probes = super::probes::Probes::new(cfg, &topo.ports);
        let mut stats = Stats::default();
        for id in topo.ports.keys() {
            stats.ports.insert(*id, Default::default());
        }
        let mut dp = Dataplane {
            health: Health::new(&topo.ports),
            topo,
            lookup: Lookup::new(fibs),
            groups: Selection::new(groups, entry_group),
            leases: Leases::default(),
            seawall: SeawallAdapter::default(),
            seal: FabricSeal::new(cfg.fabric_auth.as_ref())?,
            meter: ChainMeter::new(),
            probes,
            stats,
            now_ns: 0,
            shard: ShardRole::default(),
        };
        dp.refresh_groups();
        Ok(dp)
    }
}

impl Topology {
    /// The ports, sources and peers of `cfg` (checked).
    fn new(host: u32, cfg: &AgentConfig) -> Result<Topology, ConfigError> {
        let mut ports = BTreeMap::new();
        let mut sources = HashMap::new();
        let mut ifaces = BTreeSet::new();
        for p in &cfg.ports {
            if p.vni >= 1 << 24 {
                return Err(ConfigError::VniTooLarge(p.vni));
            }
            let (name, target, weight) = match &p.kind {
                PortKind::Vm {
                    name,
                    iface,
                    mac,
                    weight,
                } => {
                    if !valid_iface(iface) {
                        return Err(ConfigError::BadIface {
                            port: p.id,
                            iface: iface.clone(),
                        });
                    }
                    if !ifaces.insert(iface.clone()) {
                        return Err(ConfigError::DuplicateIface(iface.clone()));
                    }
                    let mac = parse_mac(mac).ok_or_else(|| ConfigError::BadMac {
                        port: p.id,
                        mac: mac.clone(),
                    })?;
                    (
                        name.clone(),
                        PortTarget::Vm {
                            iface: iface.clone(),
                            mac,
                        },
                        (*weight).max(1),
                    )
                }
                PortKind::Instance { name } => {
                    let (_, inst) = sluice_proto::instance_link(p.id)
                        .ok_or(ConfigError::NoInstanceLink(p.id))?;
                    sources.insert(
                        inst,
                        Sender {
                            source: Source::Instance(p.id),
                            slot: u32::MAX,
                        },
                    );
                    (
                        name.clone(),
                        PortTarget::Instance {
                            addr: SocketAddrV4::new(inst, GENEVE_PORT),
                        },
                        1,
                    )
                }
            };
            let port = Port {
                id: p.id,
                vni: p.vni,
                name,
                target,
                weight,
            };
            if ports.insert(p.id, port).is_some() {
                return Err(ConfigError::DuplicatePort(p.id));
            }
        }
        for i in &cfg.instances {
            if !matches!(
                ports.get(&i.port).map(|p| &p.target),
                Some(PortTarget::Instance { .. })
            ) {
                return Err(ConfigError::InstancePort {
                    name: i.name.clone(),
                    port: i.port,
                });
            }
        }
        let mut allowed = allowed_vnis(host, cfg);
        let mut restricted = restricted_sources(cfg);
        let mut peers = HashMap::new();
        let mut peer_vnis = Vec::new();
        let mut peer_sources = Vec::new();
        for p in &cfg.peers {
            if peers
                .insert(p.host, SocketAddrV4::new(p.underlay, GENEVE_PORT))
                .is_some()
            {
                return Err(ConfigError::DuplicatePeer(p.host));
            }
            // Our own underlay address never sends to us through the fabric.
            if p.host == host {
                continue;
            }
            let sender = Sender {
                source: Source::Peer(p.host),
                slot: peer_vnis.len() as u32,
            };
            if sources.insert(p.underlay, sender).is_some() {
                return Err(ConfigError::DuplicatePeer(p.host));
            }
            let mut vnis = allowed.remove(&p.host).unwrap_or_default();
            vnis.sort_unstable();
            vnis.dedup();
            peer_vnis.push(vnis.into_boxed_slice());
            let mut srcs = restricted.remove(&p.host).unwrap_or_default();
            srcs.sort_unstable_by_key(|(v, _)| *v);
            peer_sources.push(srcs.into_boxed_slice());
        }
        Ok(Topology {
            host,
            version: cfg.version,
            ports,
            peers,
            sources,
            peer_vnis,
            peer_sources,
            pardons: cfg.pardons.iter().map(|p| (p.host, p.generation)).collect(),
        })
    }

    /// True if the peer of `sender` may send `vni`'s packets from inner
    /// source `src` (its VMs' addresses only, for a tenant it runs neither
    /// NF instances nor the gateway of).
    pub(super) fn peer_may_source(&self, sender: Sender, vni: u32, src: IpAddr) -> bool {
        let Some(list) = self.peer_sources.get(sender.slot as usize) else {
            return true;
        };
        match list.binary_search_by_key(&vni, |(v, _)| *v) {
            Ok(i) => list[i].1.binary_search(&src).is_ok(),
            Err(_) => true,
        }
    }

    /// True if the peer of `sender` may send `vni` here.
    pub(super) fn peer_may_send(&self, sender: Sender, vni: u32) -> bool {
        self.peer_vnis
            .get(sender.slot as usize)
            .is_some_and(|v| v.binary_search(&vni).is_ok())
    }
}

/// Per peer host, the tenants (VNIs) it may send only from the listed inner
/// source addresses (sorted), from each tenant's
/// [`sluice_proto::TenantFib::sources`].
fn restricted_sources(cfg: &AgentConfig) -> HashMap<u32, Vec<VniSources>> {
    let mut out: HashMap<u32, Vec<VniSources>> = HashMap::new();
    for t in &cfg.tenants {
        for s in t.sources.iter().flatten() {
            let mut a = s.addrs.clone();
            a.sort_unstable();
            out.entry(s.host)
                .or_default()
                .push((t.vni, a.into_boxed_slice()));
        }
    }
    out
}

/// Per peer host, the VNIs `cfg` lets it send to `host` (unsorted): each
/// tenant's [`sluice_proto::TenantFib::senders`], or every peer for a tenant
/// without the list (a configuration from before it). A VNI no tenant of the
/// configuration has comes from no peer: this host has nothing of it.
fn allowed_vnis(host: u32, cfg: &AgentConfig) -> HashMap<u32, Vec<u32>> {
    let mut out: HashMap<u32, Vec<u32>> = HashMap::new();
    for t in &cfg.tenants {
        match &t.senders {
            Some(list) => {
                // Hosts that are not peers cannot send anyway: ignored.
                for h in list.iter().filter(|h| **h != host) {
                    out.entry(*h).or_default().push(t.vni);
                }
            }
            None => {
                for p in cfg.peers.iter().filter(|p| p.host != host) {
                    out.entry(p.host).or_default().push(t.vni);
                }
            }
        }
    }
    out
}
