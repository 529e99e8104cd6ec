//! The agent's forwarding core, sans-IO: a configuration turned into lookup
//! structures, and batches of received frames turned into messages to send.
//!
//! The I/O loop ([`crate::io`]) receives a batch from one source (a VM port's
//! packet socket, or the UDP socket that carries Geneve from the fabric and from
//! NF instances), hands it to [`Dataplane::process_vm_batch`] or
//! [`Dataplane::process_udp_batch`], and sends the resulting [`TxPlan`]. Outputs
//! never copy a received frame: each is a small header from the plan's arena
//! (rewritten MACs, or a Geneve header) followed by a slice of a received buffer,
//! which the kernel gathers from two iovecs.

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddrV4};

use serde::Serialize;
use sluice_proto::{
    AgentConfig, ChainMeasure, Counters, FailoverEvent, InstanceHealth, InstanceHeartbeat,
    PinnedFlows, PortKind, GENEVE_PORT,
};
use sluice_switch::{Action, Fib, GroupId, LookupKey, Output, PortId};
use sluice_wire::parse::{parse_into, PacketMeta, L4};

pub use crate::groups::{failover_group, Choice, GroupSel, PinKey, PinTable};
use crate::meter::ChainMeter;

use sluice_switch::tunnel::{fabric_header, geneve_header, parse_fabric_payload, SeqOption};

/// The switch's router MAC: VMs send every frame to it, and delivered frames
/// come from it.
pub const ROUTER_MAC: [u8; 6] = [0x02, 0x53, 0x4c, 0x00, 0x00, 0x01];

const ETHERTYPE_ARP: u16 = 0x0806;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ARP_LEN: usize = 42;

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

/// Why packets were dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// No FIB entry matched (or the tenant has no FIB here).
    NoMatch,
    /// The matching entry drops.
    FibDrop,
    /// The frame or its Geneve header does not parse.
    Malformed,
    /// A datagram from an address that is neither a peer nor an instance.
    UnknownSource,
    /// The kernel refused it or its queue was full.
    SendFail,
    /// The FIB sent it to a port or host this host does not know.
    UnknownOutput,
    /// An instance sent a packet of another tenant.
    WrongVni,
    /// Every instance of the selected group that may take the packet is suspected.
    NoLiveInstance,
    /// Over its sender's Seawall rate to the destination host (the sending
    /// VM's or instance's share of the path).
    RateLimited,
}

impl DropReason {
    /// Every reason, for reports that list zeros too.
    pub const ALL: [DropReason; 9] = [
        DropReason::NoMatch,
        DropReason::FibDrop,
        DropReason::Malformed,
        DropReason::UnknownSource,
        DropReason::SendFail,
        DropReason::UnknownOutput,
        DropReason::WrongVni,
        DropReason::NoLiveInstance,
        DropReason::RateLimited,
    ];

    /// The reason's name in metrics (`no_match`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DropReason::NoMatch => "no_match",
            DropReason::FibDrop => "fib_drop",
            DropReason::Malformed => "malformed",
            DropReason::UnknownSource => "unknown_source",
            DropReason::SendFail => "send_fail",
            DropReason::UnknownOutput => "unknown_output",
            DropReason::WrongVni => "wrong_vni",
            DropReason::NoLiveInstance => "no_live_instance",
            DropReason::RateLimited => "rate_limited",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Whose counters a packet counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CounterId {
    /// A port of the switch.
    Port(u16),
    /// The fabric (tunnel to and from peers, and unknown sources).
    Fabric,
}

/// Counters kept by the core (plain integers: only the data-plane thread writes
/// them; the I/O loop publishes copies).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Per port.
    pub ports: BTreeMap<u16, Counters>,
    /// Fabric.
    pub fabric: Counters,
    /// Drops by reason, over every port.
    pub drops: [u64; DropReason::ALL.len()],
    /// ARP requests answered.
    pub arp_replies: u64,
    /// Heartbeats received from NF instances.
    pub heartbeats: u64,
    /// Local speculative failovers (instances suspected).
    pub failovers: u64,
    /// Ownership leases sent to local instances (grants and renewals).
    pub leases: u64,
    /// Lease revocations sent to local instances.
    pub lease_revocations: u64,
    /// Seawall feedback messages sent to other hosts.
    pub seawall_feedback_sent: u64,
    /// Seawall feedback messages received and applied.
    pub seawall_feedback_received: u64,
}

impl Stats {
    fn counters(&mut self, c: CounterId) -> &mut Counters {
        match c {
            CounterId::Port(p) => self.ports.entry(p).or_default(),
            CounterId::Fabric => &mut self.fabric,
        }
    }

    fn drop(&mut self, c: CounterId, reason: DropReason) {
        self.counters(c).drops += 1;
        self.drops[reason.index()] += 1;
    }

    /// Drops of one reason.
    pub fn drops_of(&self, reason: DropReason) -> u64 {
        self.drops[reason.index()]
    }
}

/// Where an output message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Dest {
    /// Out of the packet socket of VM port `0`.
    Vm(u16),
    /// Through the UDP socket to this address.
    Udp(SocketAddrV4),
}

/// One message to send: `arena[head]` then `frames[frame][body]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Out {
    /// Destination.
    pub dest: Dest,
    /// Counted against (tx or send_fail).
    pub counter: CounterId,
    /// Header bytes in the plan's arena.
    pub head: (u32, u32),
    /// Index of the received frame the body comes from (unused if the body is empty).
    pub frame: u32,
    /// Body range within that frame.
    pub body: (u32, u32),
}

impl Out {
    /// Bytes on the wire (payload of the socket).
    pub fn len(&self) -> usize {
        (self.head.1 - self.head.0 + self.body.1 - self.body.0) as usize
    }

    /// True for an empty message (never produced).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The messages one received batch produced, reused from batch to batch.
#[derive(Debug, Default)]
pub struct TxPlan {
    /// Header bytes.
    pub arena: Vec<u8>,
    /// Messages, in the order they were produced.
    pub outs: Vec<Out>,
    /// A buffer the core reuses while building messages.
    scratch: Vec<u8>,
}

impl TxPlan {
    /// An empty plan.
    pub fn new() -> TxPlan {
        TxPlan::default()
    }

    /// Empties the plan, keeping its allocations.
    pub fn clear(&mut self) {
        self.arena.clear();
        self.outs.clear();
    }

    /// True when the plan has nothing to send.
    pub fn is_empty(&self) -> bool {
        self.outs.is_empty()
    }

    /// The header bytes of `o`.
    pub fn head(&self, o: &Out) -> &[u8] {
        &self.arena[o.head.0 as usize..o.head.1 as usize]
    }

    /// The body of `o`, given the received frames.
    pub fn body<'a, F: Frames + ?Sized>(&self, frames: &'a F, o: &Out) -> &'a [u8] {
        if o.body.0 == o.body.1 {
            return &[];
        }
        &frames.frame(o.frame as usize)[o.body.0 as usize..o.body.1 as usize]
    }

    /// The whole message `o` as one buffer (tests and debugging; allocates).
    pub fn message<F: Frames + ?Sized>(&self, frames: &F, o: &Out) -> Vec<u8> {
        let mut v = self.head(o).to_vec();
        v.extend_from_slice(self.body(frames, o));
        v
    }

    /// Appends a message made of `parts` alone, no received frame in it
    /// (feedback, and packets that waited in a Seawall queue).
    fn push_own(&mut self, dest: Dest, counter: CounterId, parts: &[&[u8]]) {
        let start = self.arena.len() as u32;
        for p in parts {
            self.arena.extend_from_slice(p);
        }
        self.outs.push(Out {
            dest,
            counter,
            head: (start, self.arena.len() as u32),
            frame: 0,
            body: (0, 0),
        });
    }

    fn push_head(&mut self, bytes: &[u8]) -> (u32, u32) {
        let s = self.arena.len() as u32;
        self.arena.extend_from_slice(bytes);
        (s, self.arena.len() as u32)
    }
}

/// A batch of received frames or datagrams.
pub trait Frames {
    /// How many.
    fn count(&self) -> usize;
    /// The `i`th frame or datagram.
    fn frame(&self, i: usize) -> &[u8];
    /// Where datagram `i` came from (UDP only).
    fn src(&self, i: usize) -> Option<SocketAddrV4>;
}

impl Frames for sluice_netio::RxBatch {
    fn count(&self) -> usize {
        self.len()
    }
    fn frame(&self, i: usize) -> &[u8] {
        sluice_netio::RxBatch::frame(self, i)
    }
    fn src(&self, i: usize) -> Option<SocketAddrV4> {
        sluice_netio::RxBatch::src(self, i)
    }
}

impl Frames for [(Vec<u8>, Option<SocketAddrV4>)] {
    fn count(&self) -> usize {
        self.len()
    }
    fn frame(&self, i: usize) -> &[u8] {
        &self[i].0
    }
    fn src(&self, i: usize) -> Option<SocketAddrV4> {
        self[i].1
    }
}

impl Frames for Vec<(Vec<u8>, Option<SocketAddrV4>)> {
    fn count(&self) -> usize {
        self.len()
    }
    fn frame(&self, i: usize) -> &[u8] {
        &self[i].0
    }
    fn src(&self, i: usize) -> Option<SocketAddrV4> {
        self[i].1
    }
}

/// Default time without a heartbeat after which an instance is suspected.
pub const DEFAULT_SUSPECT_NS: u64 = 30_000_000;
/// Longest validity of a lease granted to a local instance. It must end before
/// the instance can be suspected (see [`Dataplane::set_suspect_after`]); with
/// heartbeats every 10 ms, one lost heartbeat does not interrupt it.
pub const LEASE_VALID_NS: u64 = 20_000_000;
/// How long a lease's conditions must have held before it is granted: packets
/// of the ranges steered elsewhere before (a failover, a starting instance)
/// have been processed by then.
pub const LEASE_DRAIN_NS: u64 = 50_000_000;
/// Failover events kept for status.
const MAX_EVENTS: usize = 256;

/// A lease an instance could hold: (epoch, ranges, since when the conditions
/// have held on the data-plane clock).
type LeaseCandidate = (u64, Vec<(u32, u32)>, u64);

/// What the data plane knows of one NF instance's health.
#[derive(Debug, Clone, Default)]
struct Health {
    name: String,
    /// When its last heartbeat arrived (data-plane clock, ns).
    last_hb: Option<u64>,
    /// Its last heartbeat.
    hb: InstanceHeartbeat,
    suspected: bool,
    /// Its process exited (the supervisor saw it), not merely silent.
    exited: bool,
    /// The lease it could hold and since when that has been so.
    lease: Option<LeaseCandidate>,
    /// A lease was sent and not revoked since.
    granted: bool,
}

/// The lookup structures of one configuration, plus counters.
#[derive(Debug)]
pub struct Dataplane {
    host: u32,
    version: u64,
    fibs: HashMap<u32, Fib>,
    ports: BTreeMap<u16, Port>,
    peers: HashMap<u32, SocketAddrV4>,
    sources: HashMap<Ipv4Addr, Source>,
    stats: Stats,
    meta: PacketMeta,
    /// Groups as the agent selects from them, by (vni, group id).
    groups: HashMap<(u32, u32), GroupSel>,
    /// Entries whose output is a group selection: (vni, entry id) -> group id.
    entry_group: HashMap<(u32, u64), u32>,
    pins: PinTable,
    /// What the chains' applications see (handshake times, connection rates).
    meter: ChainMeter,
    /// Instance ports' health.
    health: BTreeMap<u16, Health>,
    events: Vec<FailoverEvent>,
    /// The data-plane clock (Unix ns, set by the I/O loop).
    now_ns: u64,
    suspect_ns: u64,
    /// Leases may be granted until then (data-plane clock): the control loop
    /// extends it while the controller answers, so an agent cut off from the
    /// controller stops granting and the controller may change splits without it.
    lease_allowed_until_ns: u64,
    lease_valid_ns: u64,
    /// The previous packet's lookup, replayed for the next packet of the same
    /// flow in the same batch (bulk traffic comes in runs of one flow). Cleared
    /// at every batch, so health changes between batches are always seen.
    last: LastLookup,
    /// Seawall's rate controllers of this host's ports (None: off).
    seawall: Option<Box<sluice_seawall::Sender>>,
    /// Seawall's receiving side: always on, so any rate-controlled sender
    /// gets feedback from this host.
    seawall_rx: sluice_seawall::Receiver,
    /// Port the packet being forwarded entered through (None: the fabric).
    src_port: Option<u16>,
    /// When idle Seawall entities are next forgotten (data-plane clock).
    seawall_expire_at: u64,
    /// When silent Seawall entities are next looked for.
    seawall_silence_at: u64,
}

/// What a packet waiting in a Seawall queue needs to get its tunnel header
/// when it leaves: VNI (24 bits), whether it has a chain/hop (bit 24), chain
/// (bits 25-40), hop (bits 41-48).
fn seawall_tag(vni: u32, chain_hop: Option<(u16, u8)>) -> u64 {
    let (c, h) = chain_hop.unwrap_or((0, 0));
    u64::from(vni & 0x00ff_ffff)
        | (u64::from(chain_hop.is_some()) << 24)
        | (u64::from(c) << 25)
        | (u64::from(h) << 41)
}

/// The inverse of [`seawall_tag`].
fn from_seawall_tag(t: u64) -> (u32, Option<(u16, u8)>) {
    let vni = (t & 0x00ff_ffff) as u32;
    let ch = (t >> 24) & 1 == 1;
    (vni, ch.then_some(((t >> 25) as u16, (t >> 41) as u8)))
}

/// How often idle Seawall entities are looked for.
const SEAWALL_EXPIRE_EVERY_NS: u64 = 1_000_000_000;

/// What a lookup depends on: the FIB's match fields and the group selection's
/// hash input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LookupInputs {
    in_port: Option<u16>,
    vni: u32,
    chain_hop: Option<(u16, u8)>,
    is_ip: bool,
    has_ports: bool,
    flow: sluice_wire::FlowKey,
}

/// What a lookup decided, to replay: copies, then the output or a drop.
#[derive(Debug, Default)]
struct LastLookup {
    key: Option<LookupInputs>,
    mirrors: Vec<Output>,
    chain_hop: Option<(u16, u8)>,
    verdict: Option<Result<Output, DropReason>>,
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
        let mut ports = BTreeMap::new();
        let mut sources = HashMap::new();
        let mut ifaces = std::collections::BTreeSet::new();
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
                    sources.insert(inst, Source::Instance(p.id));
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
        let mut peers = HashMap::new();
        for p in &cfg.peers {
            if peers
                .insert(p.host, SocketAddrV4::new(p.underlay, GENEVE_PORT))
                .is_some()
            {
                return Err(ConfigError::DuplicatePeer(p.host));
            }
            // Our own underlay address never sends to us through the fabric.
            if p.host != host && sources.insert(p.underlay, Source::Peer(p.host)).is_some() {
                return Err(ConfigError::DuplicatePeer(p.host));
            }
        }
        let mut stats = Stats::default();
        for id in ports.keys() {
            stats.ports.insert(*id, Counters::default());
        }
        let health = ports
            .values()
            .filter(|p| matches!(p.target, PortTarget::Instance { .. }))
            .map(|p| {
                (
                    p.id,
                    Health {
                        name: p.name.clone(),
                        ..Health::default()
                    },
                )
            })
            .collect();
        let mut dp = Dataplane {
            host,
            version: cfg.version,
            fibs,
            ports,
            peers,
            sources,
            stats,
            meta: PacketMeta::default(),
            groups,
            entry_group,
            pins: PinTable::new(crate::groups::PIN_CAPACITY, crate::groups::PIN_IDLE_NS),
            meter: ChainMeter::new(),
            health,
            events: Vec::new(),
            now_ns: 0,
            suspect_ns: DEFAULT_SUSPECT_NS,
            lease_allowed_until_ns: 0,
            lease_valid_ns: LEASE_VALID_NS,
            last: LastLookup::default(),
            seawall: None,
            seawall_rx: {
                let c = sluice_seawall::Config::default();
                sluice_seawall::Receiver::new(c.period_ns, c.queue_delay_ns)
            },
            src_port: None,
            seawall_expire_at: 0,
            seawall_silence_at: 0,
        };
        dp.refresh_groups();
        Ok(dp)
    }

    /// An empty data plane (no ports, every packet dropped), before any config.
    pub fn empty(host: u32) -> Dataplane {
        Dataplane::new(
            host,
            &AgentConfig {
                host,
                ..AgentConfig::default()
            },
        )
        .unwrap_or_else(|_| unreachable!("an empty config always installs"))
    }

    /// Takes over the counters of `old` for ports that exist in both (same id
    /// and name), the fabric's and the drop totals, so a new configuration does
    /// not reset what monitoring has seen.
    pub fn inherit_stats(&mut self, old: &Dataplane) {
        for (id, c) in &old.stats.ports {
            if let (Some(p), Some(o)) = (self.ports.get(id), old.ports.get(id)) {
                if p.name == o.name {
                    self.stats.ports.insert(*id, c.clone());
                }
            }
        }
        self.stats.fabric = old.stats.fabric.clone();
        self.stats.drops = old.stats.drops;
        self.stats.arp_replies = old.stats.arp_replies;
        self.stats.heartbeats = old.stats.heartbeats;
        self.stats.failovers = old.stats.failovers;
        self.stats.leases = old.stats.leases;
        self.stats.lease_revocations = old.stats.lease_revocations;
        // Health, suspicions and pinned flows carry over: a new split must not
        // forget which instances are down or move pinned flows.
        for (id, h) in &old.health {
            if let Some(mine) = self.health.get_mut(id) {
                if mine.name == h.name {
                    *mine = h.clone();
                }
            }
        }
        self.events.clone_from(&old.events);
        self.pins = old.pins.clone();
        self.meter = old.meter.clone();
        self.now_ns = old.now_ns;
        self.suspect_ns = old.suspect_ns;
        self.lease_allowed_until_ns = old.lease_allowed_until_ns;
        self.lease_valid_ns = old.lease_valid_ns;
        self.stats.seawall_feedback_sent = old.stats.seawall_feedback_sent;
        self.stats.seawall_feedback_received = old.stats.seawall_feedback_received;
        // Rates and sequence numbers carry over: a new configuration must not
        // free a flooding VM or look like loss to the receivers.
        self.seawall.clone_from(&old.seawall);
        self.seawall_rx.clone_from(&old.seawall_rx);
        self.apply_weights();
        self.refresh_groups();
    }

    /// Turns Seawall's rate control of this host's senders on (with `cfg`) or
    /// off. Feedback to other hosts' senders is sent either way.
    pub fn set_seawall(&mut self, cfg: Option<sluice_seawall::Config>) {
        if let Some(c) = &cfg {
            // This host's reports follow its own period too.
            self.seawall_rx = sluice_seawall::Receiver::new(c.period_ns, c.queue_delay_ns);
        }
        self.seawall = cfg.map(|c| Box::new(sluice_seawall::Sender::new(c)));
        self.apply_weights();
    }

    /// Hands the ports' weights to the rate controllers.
    fn apply_weights(&mut self) {
        if let Some(s) = &mut self.seawall {
            s.set_weights(self.ports.values().map(|p| (p.id, p.weight)));
        }
    }

    /// When the next packet waiting for its sender's rate may leave (None:
    /// nothing waits). Part of [`Dataplane::next_deadline`]; the I/O loop
    /// wakes for it without its usual slack, since the packet waits for it.
    pub fn seawall_release_at(&self) -> Option<u64> {
        self.seawall.as_ref().and_then(|s| s.next_release())
    }

    /// Whether this host's senders are rate-controlled.
    pub fn seawall_on(&self) -> bool {
        self.seawall.is_some()
    }

    /// Every rate-controlled (port, destination host) with its rate and counters.
    pub fn seawall_entities(
        &self,
    ) -> Vec<(sluice_seawall::Entity, u64, sluice_seawall::EntityStats)> {
        self.seawall
            .as_ref()
            .map(|s| s.entities())
            .unwrap_or_default()
    }

    /// Sends the Seawall feedback that is due (one message per sending host
    /// with news) into `plan`, and forgets idle senders; the I/O loop calls it
    /// every iteration (it does nothing until [`Dataplane::next_deadline`]).
    pub fn seawall_tick(&mut self, plan: &mut TxPlan) {
        let now = self.now_ns;
        if self.seawall_rx.next_deadline().is_some_and(|d| d <= now) {
            let mut buf = std::mem::take(&mut plan.scratch);
            let peers = &self.peers;
            let stats = &mut self.stats;
            self.seawall_rx.feedback(now, &mut buf, |host, msg| {
                if let Some(addr) = peers.get(&host) {
                    plan.push_own(Dest::Udp(*addr), CounterId::Fabric, &[msg]);
                    stats.seawall_feedback_sent += 1;
                }
            });
            plan.scratch = buf;
        }
        if let Some(s) = &mut self.seawall {
            // Packets that waited for their sender's rate.
            let peers = &self.peers;
            let stats = &mut self.stats;
            s.release(now, |e, seq, tag, frame| {
                let Some(addr) = peers.get(&e.host) else {
                    stats.drop(CounterId::Port(e.port), DropReason::UnknownOutput);
                    return;
                };
                let (vni, chain_hop) = from_seawall_tag(tag);
                let o = SeqOption {
                    port: e.port,
                    seq,
                    sent_us: (now / 1000) as u32,
                };
                let (g, n) = fabric_header(vni, chain_hop, Some(o));
                plan.push_own(Dest::Udp(*addr), CounterId::Fabric, &[&g[..n], frame]);
            });
            // Silence is judged in periods: once per period is enough, and
            // keeps a walk over every entity off each loop iteration.
            if now >= self.seawall_silence_at {
                s.check_silence(now);
                self.seawall_silence_at = now + s.config().period_ns;
            }
            if now >= self.seawall_expire_at {
                s.expire(now);
            }
        }
        if now >= self.seawall_expire_at {
            let idle = self
                .seawall
                .as_ref()
                .map_or(sluice_seawall::Config::default().idle_ns, |s| {
                    s.config().idle_ns
                });
            self.seawall_rx.expire(now, idle);
            self.seawall_expire_at = now + SEAWALL_EXPIRE_EVERY_NS;
        }
    }

    /// Sets the data-plane clock (Unix ns): heartbeats and pinned flows are
    /// stamped with it.
    pub fn set_now(&mut self, now_ns: u64) {
        self.now_ns = now_ns;
    }

    /// Sets how long an instance may stay silent before it is suspected.
    pub fn set_suspect_after(&mut self, ns: u64) {
        self.suspect_ns = ns.max(1);
        // A lease must end before its holder can be suspected.
        self.lease_valid_ns = LEASE_VALID_NS.min(self.suspect_ns * 2 / 3);
    }

    /// Lets the agent grant leases until `until_ns` (data-plane clock); the
    /// control loop extends it each time the controller answers.
    pub fn allow_leases_until(&mut self, until_ns: u64) {
        self.lease_allowed_until_ns = until_ns;
    }

    /// The lease the instance on `port` may hold now: the controller marked
    /// every group targeting it leased, and every one of them sends it exactly
    /// the same hash ranges by hash alone (see [`GroupSel::owned_ranges`]).
    fn lease_candidate(&self, port: u16) -> Option<(u64, Vec<(u32, u32)>)> {
        if self.now_ns >= self.lease_allowed_until_ns || self.lease_valid_ns == 0 {
            return None;
        }
        let h = self.health.get(&port)?;
        if h.suspected || h.exited {
            return None;
        }
        let target = Output::Port(PortId(port));
        let mut out: Option<(u64, Vec<(u32, u32)>)> = None;
        for g in self.groups.values() {
            if !g.orig.ranges.iter().any(|r| r.1 == target) {
                continue;
            }
            if g.lease_epoch == 0 {
                return None;
            }
            let r = g.owned_ranges(target)?;
            match &mut out {
                None => out = Some((g.lease_epoch, r)),
                Some((e, prev)) if *prev == r => *e = (*e).max(g.lease_epoch),
                Some(_) => return None,
            }
        }
        out.filter(|(_, r)| r.len() <= sluice_proto::LEASE_MAX_RANGES)
    }

    /// Answers heartbeat `seq` of the instance on `port` (at `to`) with a lease
    /// once its conditions have held for [`LEASE_DRAIN_NS`], or with a
    /// revocation if it held one and they no longer hold.
    fn answer_lease(&mut self, port: u16, seq: u32, to: SocketAddrV4, plan: &mut TxPlan) {
        let cand = self.lease_candidate(port);
        let now = self.now_ns;
        let valid_us = (self.lease_valid_ns / 1000) as u32;
        let Some(h) = self.health.get_mut(&port) else {
            return;
        };
        let msg = match cand {
            Some((epoch, ranges)) => {
                let since = match &h.lease {
                    Some((e, r, since)) if *e == epoch && *r == ranges => *since,
                    _ => now,
                };
                h.lease = Some((epoch, ranges.clone(), since));
                if now >= since.saturating_add(LEASE_DRAIN_NS) {
                    h.granted = true;
                    self.stats.leases += 1;
                    Some(sluice_proto::InstanceLease {
                        epoch,
                        hb_seq: seq,
                        valid_us,
                        ranges,
                    })
                } else {
                    None
                }
            }
            None => {
                h.lease = None;
                None
            }
        };
        let msg = match msg {
            Some(m) => m,
            None if h.granted => {
                h.granted = false;
                self.stats.lease_revocations += 1;
                sluice_proto::InstanceLease::default()
            }
            None => return,
        };
        let head = plan.push_head(&msg.encode());
        plan.outs.push(Out {
            dest: Dest::Udp(to),
            counter: CounterId::Port(port),
            head,
            frame: 0,
            body: (0, 0),
        });
    }

    /// Recomputes every group's effective targets from the suspects; returns the
    /// number of groups that differ from the controller's.
    fn refresh_groups(&mut self) -> u32 {
        let ports = |f: fn(&Health) -> bool| -> Vec<u16> {
            self.health
                .iter()
                .filter(|(_, h)| f(h))
                .map(|(p, _)| *p)
                .collect()
        };
        let dead = ports(|h| h.suspected);
        // Local-state groups fail over only what has exited (see GroupSel).
        let exited = ports(|h| h.exited);
        // Instances never heard from may still be starting: new flows avoid them
        // while a ready instance can take them (a scale-out loses nothing to a
        // process that is not listening yet).
        let starting = ports(|h| h.last_hb.is_none());
        let mut changed = 0;
        for g in self.groups.values_mut() {
            let dead = if g.local_state { &exited } else { &dead };
            let moved = g.refresh_ready(
                |o| matches!(o, Output::Port(PortId(p)) if dead.contains(&p)),
                |o| matches!(o, Output::Port(PortId(p)) if starting.contains(&p)),
            );
            changed += u32::from(moved);
        }
        changed
    }

    /// The earliest time (data-plane clock) an instance not yet suspected will be
    /// if no heartbeat arrives (None: nothing to watch).
    pub fn next_deadline(&self) -> Option<u64> {
        let hb = self
            .health
            .values()
            .filter(|h| !h.suspected)
            .filter_map(|h| h.last_hb)
            .map(|t| t + self.suspect_ns)
            .min();
        [
            hb,
            self.seawall_rx.next_deadline(),
            self.seawall_release_at(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Suspects instances silent for the suspicion timeout and, in the same call,
    /// rewrites the groups that target them; `clock` reads the time the rewrite is
    /// in force. Returns whether anything changed. An instance never heard from is
    /// not suspected (it may still be starting).
    pub fn check_health(&mut self, now_ns: u64, mut clock: impl FnMut() -> u64) -> bool {
        self.now_ns = now_ns;
        let mut newly = Vec::new();
        for (port, h) in self.health.iter_mut() {
            if h.suspected {
                continue;
            }
            if let Some(t) = h.last_hb {
                let deadline = t + self.suspect_ns;
                if now_ns > deadline {
                    h.suspected = true;
                    // Its ranges go elsewhere now: a lease needs a new drain.
                    h.lease = None;
                    newly.push((*port, h.name.clone(), deadline));
                }
            }
        }
        if newly.is_empty() {
            return false;
        }
        let groups = self.refresh_groups();
        let applied = clock() / 1000;
        for (port, name, deadline) in newly {
            self.stats.failovers += 1;
            self.events.push(FailoverEvent {
                instance: name,
                port,
                reason: "heartbeat".into(),
                suspected_at_us: deadline / 1000,
                detected_at_us: now_ns / 1000,
                applied_at_us: applied,
                rejoined_at_us: None,
                groups,
            });
        }
        if self.events.len() > MAX_EVENTS {
            let extra = self.events.len() - MAX_EVENTS;
            self.events.drain(..extra);
        }
        true
    }

    /// The supervisor saw the process of the instance on `port` exit: suspect it
    /// now (if the heartbeat timeout has not already) and rewrite its groups.
    /// Returns whether anything changed.
    pub fn instance_exited(
        &mut self,
        port: u16,
        now_ns: u64,
        mut clock: impl FnMut() -> u64,
    ) -> bool {
        self.now_ns = now_ns;
        let Some(h) = self.health.get_mut(&port) else {
            return false;
        };
        if h.exited {
            return false;
        }
        // Already suspected by its silence: only local-state groups change now.
        let was_suspected = std::mem::replace(&mut h.suspected, true);
        h.exited = true;
        h.lease = None;
        let name = h.name.clone();
        if was_suspected {
            // Its failover event was logged when it fell silent; only local-state
            // groups, which ignore silence, move its flows now.
            let target = Output::Port(PortId(port));
            let local = self
                .groups
                .values()
                .any(|g| g.local_state && g.orig.ranges.iter().any(|r| r.1 == target));
            if local {
                self.refresh_groups();
            }
            return local;
        }
        let groups = self.refresh_groups();
        self.stats.failovers += 1;
        self.events.push(FailoverEvent {
            instance: name,
            port,
            reason: "exited".into(),
            suspected_at_us: now_ns / 1000,
            detected_at_us: now_ns / 1000,
            applied_at_us: clock() / 1000,
            rejoined_at_us: None,
            groups,
        });
        if self.events.len() > MAX_EVENTS {
            let extra = self.events.len() - MAX_EVENTS;
            self.events.drain(..extra);
        }
        true
    }

    /// Records a heartbeat from the instance on `port`; a suspected instance
    /// rejoins (its groups are restored) at once.
    fn heartbeat(&mut self, port: u16, hb: InstanceHeartbeat) {
        self.stats.heartbeats += 1;
        let now = self.now_ns;
        let Some(h) = self.health.get_mut(&port) else {
            return;
        };
        let first = h.last_hb.is_none();
        h.last_hb = Some(now);
        h.hb = hb;
        h.exited = false;
        if first && !h.suspected {
            // Ready: new flows may go to it now.
            self.refresh_groups();
        } else if h.suspected {
            h.suspected = false;
            if let Some(e) = self
                .events
                .iter_mut()
                .rev()
                .find(|e| e.port == port && e.rejoined_at_us.is_none())
            {
                e.rejoined_at_us = Some(now / 1000);
            }
            self.refresh_groups();
        }
    }

    /// True if the instance on `port` is suspected.
    pub fn suspected(&self, port: u16) -> bool {
        self.health.get(&port).is_some_and(|h| h.suspected)
    }

    /// Instance health (`alive` is left false: the supervisor knows it).
    pub fn health_report(&self) -> Vec<InstanceHealth> {
        self.health
            .iter()
            .map(|(port, h)| InstanceHealth {
                name: h.name.clone(),
                port: *port,
                alive: false,
                suspected: h.suspected,
                last_heartbeat_age_ms: h.last_hb.map(|t| self.now_ns.saturating_sub(t) / 1_000_000),
                rx_packets: h.hb.rx_packets,
                tx_packets: h.hb.tx_packets,
                drops: h.hb.drops,
                queue_drops: h.hb.queue_drops,
                cpu_ms: h.hb.cpu_us / 1000,
                lease_epoch: h.hb.lease_epoch,
                cache_hits: h.hb.cache_hits,
            })
            .collect()
    }

    /// Failover events, oldest first.
    pub fn failover_events(&self) -> &[FailoverEvent] {
        &self.events
    }

    /// What the agent measured of each chain entering at its VMs (cumulative);
    /// also forgets handshakes that were never answered.
    pub fn chain_measures(&mut self) -> Vec<ChainMeasure> {
        self.meter.expire(self.now_ns);
        self.meter.report()
    }

    /// Live pinned flows per target of every pinned group (draining targets
    /// listed even with no flow left, so a drain can be awaited).
    pub fn pinned_flows(&self) -> Vec<PinnedFlows> {
        let counts = self.pins.counts(self.now_ns);
        let mut out: Vec<PinnedFlows> = counts
            .iter()
            .map(|((vni, group, _), (target, n))| PinnedFlows {
                vni: *vni,
                group: *group,
                target: *target,
                flows: *n,
                draining: self
                    .groups
                    .get(&(*vni, *group))
                    .is_some_and(|g| g.draining.contains(target)),
            })
            .collect();
        let mut keys: Vec<&(u32, u32)> = self.groups.keys().collect();
        keys.sort();
        for k in keys {
            for t in &self.groups[k].draining {
                if !out.iter().any(|p| (p.vni, p.group) == *k && p.target == *t) {
                    out.push(PinnedFlows {
                        vni: k.0,
                        group: k.1,
                        target: *t,
                        flows: 0,
                        draining: true,
                    });
                }
            }
        }
        out
    }

    /// Version of the configuration.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Host id.
    pub fn host(&self) -> u32 {
        self.host
    }

    /// The ports, by id.
    pub fn ports(&self) -> &BTreeMap<u16, Port> {
        &self.ports
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Who sends from `addr`.
    pub fn source(&self, addr: Ipv4Addr) -> Option<Source> {
        self.sources.get(&addr).copied()
    }

    /// Counts messages of a plan as sent (`sent` of them, in plan order) or failed
    /// (the rest): what the I/O loop calls after each send.
    pub fn account_sent(&mut self, outs: &[Out], sent: usize) {
        for (i, o) in outs.iter().enumerate() {
            if i < sent {
                let c = self.stats.counters(o.counter);
                c.tx_packets += 1;
                c.tx_bytes += o.len() as u64;
            } else {
                self.stats.drop(o.counter, DropReason::SendFail);
            }
        }
    }

    /// Processes frames received on VM port `port`, appending messages to `plan`.
    pub fn process_vm_batch<F: Frames + ?Sized>(
        &mut self,
        port: u16,
        frames: &F,
        plan: &mut TxPlan,
    ) {
        let Some(p) = self.ports.get(&port) else {
            // A socket of a port that just left the config: nothing to match.
            for i in 0..frames.count() {
                let c = self.stats.counters(CounterId::Fabric);
                c.rx_packets += 1;
                c.rx_bytes += frames.frame(i).len() as u64;
                self.stats
                    .drop(CounterId::Fabric, DropReason::UnknownSource);
            }
            return;
        };
        let vni = p.vni;
        self.last.key = None;
        self.src_port = Some(port);
        for i in 0..frames.count() {
            let f = frames.frame(i);
            let id = CounterId::Port(port);
            let c = self.stats.counters(id);
            c.rx_packets += 1;
            c.rx_bytes += f.len() as u64;
            if f.len() >= 14 && u16::from_be_bytes([f[12], f[13]]) == ETHERTYPE_ARP {
                self.arp(port, f, plan);
                continue;
            }
            if let Some((chain, _)) = self.forward(id, Some(port), vni, None, f, i, 0, plan) {
                self.meter
                    .entered(vni, chain, &self.meta, f.len(), self.now_ns);
            }
        }
    }

    /// Processes Geneve datagrams received by the UDP socket (from fabric peers
    /// and NF instances), appending messages to `plan`.
    pub fn process_udp_batch<F: Frames + ?Sized>(&mut self, frames: &F, plan: &mut TxPlan) {
        self.last.key = None;
        for i in 0..frames.count() {
            let d = frames.frame(i);
            let source = frames
                .src(i)
                .and_then(|a| self.sources.get(a.ip()).copied());
            let (id, in_port) = match source {
                Some(Source::Instance(p)) => (CounterId::Port(p), Some(p)),
                Some(Source::Peer(_)) => (CounterId::Fabric, None),
                None => (CounterId::Fabric, None),
            };
            if let Some(p) = in_port {
                if InstanceHeartbeat::is_heartbeat(d) {
                    match InstanceHeartbeat::decode(d) {
                        Some(hb) => {
                            self.heartbeat(p, hb);
                            if let Some(to) = frames.src(i) {
                                self.answer_lease(p, hb.seq, to, plan);
                            }
                        }
                        None => self.stats.drop(id, DropReason::Malformed),
                    }
                    continue;
                }
            }
            let c = self.stats.counters(id);
            c.rx_packets += 1;
            c.rx_bytes += d.len() as u64;
            if source.is_none() {
                self.stats.drop(id, DropReason::UnknownSource);
                continue;
            }
            if let Some(Source::Peer(host)) = source {
                if sluice_seawall::wire::is_feedback(d) {
                    match sluice_seawall::wire::decode_feedback(d) {
                        Ok(reports) => {
                            self.stats.seawall_feedback_received += 1;
                            if let Some(s) = &mut self.seawall {
                                s.on_feedback(host, reports, self.now_ns);
                            }
                        }
                        Err(_) => self.stats.drop(id, DropReason::Malformed),
                    }
                    continue;
                }
            }
            let Ok(g) = parse_fabric_payload(d) else {
                self.stats.drop(id, DropReason::Malformed);
                continue;
            };
            if let Some(p) = in_port {
                // An instance speaks for its own tenant only.
                if self.ports.get(&p).map(|p| p.vni) != Some(g.vni) {
                    self.stats.drop(id, DropReason::WrongVni);
                    continue;
                }
            }
            if let (Some(Source::Peer(host)), Some(o)) = (source, g.seq) {
                self.seawall_rx
                    .on_packet(host, o.port, o.seq, Some(o.sent_us), self.now_ns);
            }
            // What an instance sends back counts against its port's share.
            self.src_port = in_port;
            self.forward(id, in_port, g.vni, g.chain_hop, d, i, g.inner_at, plan);
        }
    }

    /// Looks `frame[off..]` up and emits its outputs; returns the chain and hop
    /// the packet was sent on with (None: not parsed, or in no chain).
    #[allow(clippy::too_many_arguments)]
    fn forward(
        &mut self,
        id: CounterId,
        in_port: Option<u16>,
        vni: u32,
        chain_hop: Option<(u16, u8)>,
        buf: &[u8],
        index: usize,
        off: usize,
        plan: &mut TxPlan,
    ) -> Option<(u16, u8)> {
        let inner = &buf[off..];
        if parse_into(inner, &mut self.meta).is_err() {
            self.stats.drop(id, DropReason::Malformed);
            return None;
        }
        let key = LookupInputs {
            in_port,
            vni,
            chain_hop,
            is_ip: self.meta.is_ip(),
            has_ports: matches!(self.meta.l4, L4::Tcp | L4::Udp),
            flow: self.meta.flow,
        };
        if self.last.key == Some(key) {
            // Same inputs as the packet before: same entry, same group choice.
            // (The FIB's own per-entry hit counters then count lookups, not
            // packets; the agent reports its own counters, not those.)
            let hop = self.last.chain_hop;
            for k in 0..self.last.mirrors.len() {
                let m = self.last.mirrors[k];
                self.emit(m, vni, hop, buf, index, off, plan);
            }
            if let Some(v) = self.last.verdict {
                self.conclude(id, v, vni, hop, buf, index, off, plan);
            }
            return hop;
        }
        self.last.key = None;
        let Some(fib) = self.fibs.get_mut(&vni) else {
            self.stats.drop(id, DropReason::NoMatch);
            return None;
        };
        let mut d = fib.lookup(&LookupKey {
            in_port: in_port.map(PortId),
            vni,
            chain_hop,
            meta: &self.meta,
        });
        // Pinned groups remember flows by time; their choices are not replayed.
        let mut replayable = true;
        let mut verdict = None;
        if !d.drop {
            // The agent selects from its own copy of the group: failover and
            // pinning apply.
            let gid = d
                .entry
                .and_then(|e| self.entry_group.get(&(vni, e)).copied());
            if let Some(g) = gid {
                replayable = !self.groups.get(&(vni, g)).is_some_and(|s| s.pinned);
                match self.select(vni, g, in_port.is_none()) {
                    Some(o) => d.output = Some(o),
                    None => verdict = Some(Err(DropReason::NoLiveInstance)),
                }
            }
        }
        let verdict = verdict.unwrap_or(match (d.drop, d.output) {
            (true, _) => Err(DropReason::FibDrop),
            (false, Some(o)) => Ok(o),
            (false, None) => Err(DropReason::NoMatch),
        });
        for m in &d.mirrors {
            self.emit(*m, vni, d.chain_hop, buf, index, off, plan);
        }
        self.conclude(id, verdict, vni, d.chain_hop, buf, index, off, plan);
        if replayable {
            self.last.mirrors.clone_from(&d.mirrors);
            self.last.chain_hop = d.chain_hop;
            self.last.verdict = Some(verdict);
            self.last.key = Some(key);
        }
        d.chain_hop
    }

    /// Emits the packet to its output, or counts its drop.
    #[allow(clippy::too_many_arguments)]
    fn conclude(
        &mut self,
        id: CounterId,
        verdict: Result<Output, DropReason>,
        vni: u32,
        chain_hop: Option<(u16, u8)>,
        buf: &[u8],
        index: usize,
        off: usize,
        plan: &mut TxPlan,
    ) {
        let reason = match verdict {
            Ok(o) if self.emit(o, vni, chain_hop, buf, index, off, plan) => return,
            Ok(_) => DropReason::UnknownOutput,
            Err(r) => r,
        };
        self.stats.drop(id, reason);
    }

    /// The target of group `g` for the packet in `self.meta` (None: no live one).
    fn select(&mut self, vni: u32, g: u32, from_fabric: bool) -> Option<Output> {
        let sel = self.groups.get(&(vni, g))?;
        let flow = self.meta.flow;
        let hash = flow.symmetric_hash();
        if !sel.pinned {
            return match sel.choose(hash, from_fabric) {
                Choice::Out(o) => Some(o),
                Choice::NoLive => None,
            };
        }
        let key = PinKey {
            vni,
            group: g,
            fabric: from_fabric,
            flow: flow.canonical().0,
        };
        if let Some(o) = self.pins.get(&key, self.now_ns) {
            if sel.may_keep(o, from_fabric) {
                return Some(o);
            }
        }
        match sel.choose(hash, from_fabric) {
            Choice::Out(o) => {
                self.pins.insert(key, o, self.now_ns);
                Some(o)
            }
            Choice::NoLive => None,
        }
    }

    /// Emits one copy of `buf[off..]` to `o`; false if `o` is unknown here.
    #[allow(clippy::too_many_arguments)]
    fn emit(
        &mut self,
        o: Output,
        vni: u32,
        chain_hop: Option<(u16, u8)>,
        buf: &[u8],
        index: usize,
        off: usize,
        plan: &mut TxPlan,
    ) -> bool {
        let end = buf.len() as u32;
        let (dest, counter, head, body_start) = match o {
            Output::Port(PortId(q)) => match self.ports.get(&q) {
                Some(Port {
                    target: PortTarget::Vm { mac, .. },
                    ..
                }) => {
                    if self.meter.waiting() {
                        self.meter.delivered(vni, &self.meta, self.now_ns);
                    }
                    let mut h = [0u8; 12];
                    h[..6].copy_from_slice(mac);
                    h[6..].copy_from_slice(&ROUTER_MAC);
                    (
                        Dest::Vm(q),
                        CounterId::Port(q),
                        plan.push_head(&h),
                        off + 12,
                    )
                }
                Some(Port {
                    target: PortTarget::Instance { addr },
                    ..
                }) => {
                    let (h, n) = geneve_header(vni, chain_hop);
                    (
                        Dest::Udp(*addr),
                        CounterId::Port(q),
                        plan.push_head(&h[..n]),
                        off,
                    )
                }
                None => return false,
            },
            Output::Host(h) => {
                if h.0 == self.host {
                    return false;
                }
                let Some(addr) = self.peers.get(&h.0) else {
                    return false;
                };
                let addr = *addr;
                // A rate-controlled sender's packet: admitted or dropped here,
                // numbered for the receiver's loss count.
                let mut seq = None;
                if let (Some(sw), Some(port)) = (&mut self.seawall, self.src_port) {
                    let tag = seawall_tag(vni, chain_hop);
                    match sw.offer(port, h.0, tag, &buf[off..], self.now_ns) {
                        sluice_seawall::Offer::Send(s) => {
                            seq = Some(SeqOption {
                                port,
                                seq: s,
                                sent_us: (self.now_ns / 1000) as u32,
                            })
                        }
                        // It leaves later, from `seawall_tick`.
                        sluice_seawall::Offer::Queued => return true,
                        sluice_seawall::Offer::Dropped => {
                            self.stats
                                .drop(CounterId::Port(port), DropReason::RateLimited);
                            return true;
                        }
                    }
                }
                let (g, n) = fabric_header(vni, chain_hop, seq);
                (
                    Dest::Udp(addr),
                    CounterId::Fabric,
                    plan.push_head(&g[..n]),
                    off,
                )
            }
        };
        // A frame shorter than its MACs was refused by the parser already.
        let body_start = body_start.min(buf.len()) as u32;
        plan.outs.push(Out {
            dest,
            counter,
            head,
            frame: index as u32,
            body: (body_start, end),
        });
        true
    }

    /// Answers an ARP request for any IPv4 target with the router MAC.
    fn arp(&mut self, port: u16, f: &[u8], plan: &mut TxPlan) {
        let id = CounterId::Port(port);
        if f.len() < ARP_LEN {
            self.stats.drop(id, DropReason::Malformed);
            return;
        }
        let a = &f[14..];
        let htype = u16::from_be_bytes([a[0], a[1]]);
        let ptype = u16::from_be_bytes([a[2], a[3]]);
        let op = u16::from_be_bytes([a[6], a[7]]);
        if htype != 1 || ptype != ETHERTYPE_IPV4 || a[4] != 6 || a[5] != 4 {
            self.stats.drop(id, DropReason::Malformed);
            return;
        }
        let (sha, spa, tpa) = (&a[8..14], &a[14..18], &a[24..28]);
        // Replies, and probes or announcements for the sender's own address (what
        // duplicate address detection sends), get no answer.
        if op != 1 || spa == tpa || spa == [0, 0, 0, 0] {
            self.stats.drop(id, DropReason::NoMatch);
            return;
        }
        let mut r = [0u8; ARP_LEN];
        r[..6].copy_from_slice(sha);
        r[6..12].copy_from_slice(&ROUTER_MAC);
        r[12..14].copy_from_slice(&ETHERTYPE_ARP.to_be_bytes());
        r[14..22].copy_from_slice(&[0, 1, 0x08, 0x00, 6, 4, 0, 2]);
        r[22..28].copy_from_slice(&ROUTER_MAC);
        r[28..32].copy_from_slice(tpa);
        r[32..38].copy_from_slice(sha);
        r[38..42].copy_from_slice(spa);
        let head = plan.push_head(&r);
        plan.outs.push(Out {
            dest: Dest::Vm(port),
            counter: id,
            head,
            frame: 0,
            body: (0, 0),
        });
        self.stats.arp_replies += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_controller::{compile, Placement};
    use sluice_proto::{InstanceConfig, Peer, PortConfig, TenantFib};
    use sluice_switch::{Action, Entry, HostId, Match, Prefix};
    use sluice_tenant::TenantSpec;
    use sluice_wire::build;
    use sluice_wire::tcp::flags::SYN;

    const VNI: u32 = 42;
    const VIP_A: [u8; 4] = [10, 10, 1, 100];
    const GW_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

    fn underlay(h: u32) -> Ipv4Addr {
        Ipv4Addr::new(10, 255, 0, h as u8)
    }

    fn peers() -> Vec<Peer> {
        (1..=3)
            .map(|h| Peer {
                host: h,
                underlay: underlay(h),
            })
            .collect()
    }

    fn inst_addr(port: u16) -> SocketAddrV4 {
        SocketAddrV4::new(sluice_proto::instance_link(port).unwrap().1, GENEVE_PORT)
    }

    /// Host 1 of the Figure 4 tenant as in crates/controller/tests/walk.rs: the
    /// gateway on port 1, fw/0 on 10, ips on 11, mon on 12 (fw/1 on host 2).
    fn figure4_host1() -> AgentConfig {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/tenant/figure4.yaml"
        ))
        .unwrap();
        let spec =
            TenantSpec::parse(&text, "figure4.yaml", Some(&sluice_builtin::registry())).unwrap();
        let (h1, h2, h3) = (HostId(1), HostId(2), HostId(3));
        let mut p = Placement {
            gateway: (h1, PortId(1)),
            vni: VNI,
            ..Placement::default()
        };
        for (vm, h, port) in [
            ("web-a1", h2, 20),
            ("web-b1", h2, 21),
            ("web-a2", h3, 20),
            ("web-b2", h3, 21),
        ] {
            p.vms.insert(vm.into(), (h, PortId(port)));
        }
        for (mb, list) in [
            ("fw", vec![(h1, 10), (h2, 10)]),
            ("ips", vec![(h1, 11)]),
            ("mon", vec![(h1, 12)]),
            ("lb-a", vec![(h2, 11)]),
            ("lb-b", vec![(h3, 12)]),
        ] {
            p.instances.insert(
                mb.into(),
                list.iter().map(|&(h, port)| (h, PortId(port))).collect(),
            );
        }
        let c = compile(&spec, &p).unwrap();
        let hf = c.hosts[&h1].clone();
        let mut ports = vec![PortConfig {
            id: 1,
            vni: VNI,
            kind: PortKind::Vm {
                name: "gw".into(),
                iface: "gw0".into(),
                mac: "02:00:00:00:00:01".into(),
                weight: 1,
            },
        }];
        let mut instances = Vec::new();
        for (id, name) in [(10, "acme/fw/0"), (11, "acme/ips/0"), (12, "acme/mon/0")] {
            ports.push(PortConfig {
                id,
                vni: VNI,
                kind: PortKind::Instance { name: name.into() },
            });
            instances.push(InstanceConfig {
                name: name.into(),
                tenant: "acme".into(),
                middlebox: name.split('/').nth(1).unwrap().into(),
                port: id,
                vni: VNI,
                chain_yaml: String::new(),
                state: "local".into(),
            });
        }
        AgentConfig {
            version: 1,
            host: 1,
            peers: peers(),
            ports,
            tenants: vec![TenantFib {
                tenant: "acme".into(),
                vni: VNI,
                entries: hf.entries,
                groups: hf.groups.into_iter().map(|(g, gr)| (g.0, gr)).collect(),
            }],
            instances,
            group_policies: vec![],
        }
    }

    /// Two VMs on ports 1 and 2 forwarding to each other by destination, and from
    /// the fabric to VM 2.
    fn two_vms() -> AgentConfig {
        let vm = |id: u16, mac: &str| PortConfig {
            id,
            vni: 7,
            kind: PortKind::Vm {
                name: format!("vm{id}"),
                iface: format!("p{id}"),
                mac: mac.into(),
                // Port 2 weighs 2: weights reach the rate controllers.
                weight: id,
            },
        };
        let to = |id: u64, dst: &str, port: u16| Entry {
            id,
            priority: 10,
            m: Match {
                dst: Some(Prefix::parse(dst).unwrap()),
                ..Match::default()
            },
            actions: vec![Action::Output(Output::Port(PortId(port)))],
        };
        AgentConfig {
            version: 5,
            host: 1,
            peers: peers(),
            ports: vec![vm(1, "02:00:00:00:01:01"), vm(2, "02:00:00:00:01:02")],
            tenants: vec![TenantFib {
                tenant: "t".into(),
                vni: 7,
                entries: vec![
                    to(1, "10.0.0.1/32", 1),
                    to(2, "10.0.0.2/32", 2),
                    Entry {
                        id: 3,
                        priority: 5,
                        m: Match {
                            dst: Some(Prefix::parse("10.9.0.0/16").unwrap()),
                            ..Match::default()
                        },
                        actions: vec![Action::Output(Output::Host(HostId(3)))],
                    },
                ],
                groups: vec![],
            }],
            instances: vec![],
            group_policies: vec![],
        }
    }

    fn frames(list: Vec<Vec<u8>>) -> Vec<(Vec<u8>, Option<SocketAddrV4>)> {
        list.into_iter().map(|f| (f, None)).collect()
    }

    fn from(addr: SocketAddrV4, list: Vec<Vec<u8>>) -> Vec<(Vec<u8>, Option<SocketAddrV4>)> {
        list.into_iter().map(|f| (f, Some(addr))).collect()
    }

    fn with_macs(mut f: Vec<u8>, dst: [u8; 6], src: [u8; 6]) -> Vec<u8> {
        f[..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&src);
        f
    }

    struct G {
        vni: u32,
        chain_hop: Option<(u16, u8)>,
        header_len: usize,
    }

    fn parse(d: &[u8]) -> G {
        let (vni, chain_hop, header_len) = sluice_switch::tunnel::parse_geneve_payload(d).unwrap();
        G {
            vni,
            chain_hop,
            header_len,
        }
    }

    fn encap(vni: u32, ch: Option<(u16, u8)>, inner: &[u8]) -> Vec<u8> {
        let (h, n) = geneve_header(vni, ch);
        let mut v = h[..n].to_vec();
        v.extend_from_slice(inner);
        v
    }

    /// Heartbeats from the instances on `ports`, at the data plane's clock.
    fn ready(dp: &mut Dataplane, ports: &[u16]) {
        let mut plan = TxPlan::new();
        for p in ports {
            dp.process_udp_batch(&heartbeat_from(*p), &mut plan);
        }
        assert!(plan.outs.is_empty(), "heartbeats are not forwarded");
    }

    #[test]
    fn instances_get_new_flows_once_they_heartbeat() {
        let mut dp = Dataplane::new(1, &figure4_host1()).unwrap();
        let host2 = Dest::Udp(SocketAddrV4::new(underlay(2), GENEVE_PORT));
        // fw/0 (port 10) is still starting: host 2's firewall takes every flow.
        for i in 1..=30 {
            assert_eq!(fw_dest(&mut dp, i), Some(host2));
        }
        ready(&mut dp, &[10]);
        let now: Vec<Option<Dest>> = (1..=30).map(|i| fw_dest(&mut dp, i)).collect();
        assert!(now.contains(&Some(Dest::Udp(inst_addr(10)))));
        // The IPS (port 11), alone in its group, is used while starting.
        assert!(!dp.suspected(11));
    }

    #[test]
    fn client_goes_to_first_hop_and_returns_to_the_next() {
        let mut dp = Dataplane::new(1, &figure4_host1()).unwrap();
        ready(&mut dp, &[10, 11, 12]);
        let mut plan = TxPlan::new();
        // Find a client flow the hash sends to the local firewall instance.
        let fw0 = inst_addr(10);
        let mut found = None;
        for i in 1..=60u8 {
            let syn = with_macs(
                build::tcp_v4(
                    [198, 51, 100, i],
                    VIP_A,
                    40_000 + i as u16,
                    80,
                    1,
                    0,
                    SYN,
                    b"",
                ),
                ROUTER_MAC,
                GW_MAC,
            );
            let batch = frames(vec![syn.clone()]);
            plan.clear();
            dp.process_vm_batch(1, &batch, &mut plan);
            // One copy to the monitor, one to a firewall instance.
            assert_eq!(plan.outs.len(), 2, "{:?}", plan.outs);
            let mon = plan.outs[0];
            assert_eq!(mon.dest, Dest::Udp(inst_addr(12)));
            let fw = *plan.outs.last().unwrap();
            match fw.dest {
                Dest::Udp(a) if a == fw0 => {
                    found = Some((syn, plan.message(&batch, &fw)));
                    break;
                }
                Dest::Udp(a) => assert_eq!(a, SocketAddrV4::new(underlay(2), GENEVE_PORT)),
                d => panic!("{d:?}"),
            }
        }
        let (syn, msg) = found.expect("some flow picks fw/0");
        let g = parse(&msg);
        assert_eq!(g.vni, VNI);
        let (chain, hop) = g.chain_hop.expect("marked");
        assert_eq!(hop, 1, "at the first middlebox");
        assert_eq!(
            &msg[g.header_len..],
            &syn[..],
            "the inner frame is untouched"
        );

        // The firewall sends it back with the same header: on to the IPS.
        let back = from(fw0, vec![msg.clone()]);
        plan.clear();
        dp.process_udp_batch(&back, &mut plan);
        assert_eq!(plan.outs.len(), 1, "{:?}", plan.outs);
        assert_eq!(plan.outs[0].dest, Dest::Udp(inst_addr(11)));
        let m2 = plan.message(&back, &plan.outs[0]);
        let g2 = parse(&m2);
        assert_eq!(g2.chain_hop, Some((chain, 2)));
        assert_eq!(&m2[g2.header_len..], &syn[..]);
        dp.account_sent(&plan.outs, 1);
        let s = dp.stats();
        assert_eq!(s.ports[&10].rx_packets, 1);
        assert_eq!(s.ports[&11].tx_packets, 1);
        assert_eq!(s.ports[&11].tx_bytes, m2.len() as u64);
        assert!(s.ports[&1].rx_packets >= 1);
    }

    #[test]
    fn delivery_to_a_vm_rewrites_macs_and_fabric_is_handled() {
        let mut dp = Dataplane::new(1, &two_vms()).unwrap();
        let mut plan = TxPlan::new();
        let f = with_macs(
            build::udp_v4([10, 0, 0, 1], [10, 0, 0, 2], 1000, 2000, b"hello"),
            ROUTER_MAC,
            [2, 0, 0, 0, 1, 1],
        );
        let batch = frames(vec![f.clone(), f.clone()]);
        dp.process_vm_batch(1, &batch, &mut plan);
        assert_eq!(plan.outs.len(), 2);
        let m = plan.message(&batch, &plan.outs[1]);
        assert_eq!(plan.outs[1].dest, Dest::Vm(2));
        assert_eq!(&m[..6], &[2, 0, 0, 0, 1, 2], "dst = the VM's MAC");
        assert_eq!(&m[6..12], &ROUTER_MAC);
        assert_eq!(&m[12..], &f[12..]);
        assert_eq!(plan.outs[1].frame, 1);
        dp.account_sent(&plan.outs, 1);
        assert_eq!(dp.stats().ports[&2].tx_packets, 1);
        assert_eq!(dp.stats().drops_of(DropReason::SendFail), 1);

        // To a remote prefix: Geneve to host 3, no chain mark.
        plan.clear();
        let far = build::udp_v4([10, 0, 0, 1], [10, 9, 1, 1], 1, 2, b"x");
        let batch = frames(vec![far.clone()]);
        dp.process_vm_batch(1, &batch, &mut plan);
        assert_eq!(
            plan.outs[0].dest,
            Dest::Udp(SocketAddrV4::new(underlay(3), GENEVE_PORT))
        );
        let m = plan.message(&batch, &plan.outs[0]);
        assert_eq!(parse(&m).chain_hop, None);
        assert_eq!(&m[8..], &far[..]);

        // From the fabric (peer 2) to VM 2.
        plan.clear();
        let batch = from(
            SocketAddrV4::new(underlay(2), GENEVE_PORT),
            vec![encap(7, None, &f)],
        );
        dp.process_udp_batch(&batch, &mut plan);
        assert_eq!(plan.outs.len(), 1);
        assert_eq!(plan.outs[0].dest, Dest::Vm(2));
        let m = plan.message(&batch, &plan.outs[0]);
        assert_eq!(&m[12..], &f[12..]);
        assert_eq!(dp.stats().fabric.rx_packets, 1);
    }

    /// Host 1 sends through Seawall to host 3, host 3 counts and reports, and
    /// host 1's controller acts on the report: a flooding VM is cut to about
    /// what got through and then policed at its own host.
    #[test]
    fn seawall_numbers_packets_to_other_hosts_and_obeys_their_loss_reports() {
        let ms = 1_000_000u64;
        let mut tx = Dataplane::new(1, &two_vms()).unwrap();
        tx.set_seawall(Some(sluice_seawall::Config {
            max_rate_bps: 1_000_000_000,
            ..sluice_seawall::Config::default()
        }));
        let mut rx_cfg = two_vms();
        rx_cfg.host = 3;
        let mut rx = Dataplane::new(3, &rx_cfg).unwrap();
        assert_eq!(
            sluice_switch::tunnel::OPTION_SEQ,
            sluice_seawall::wire::OPTION_SEQ
        );
        let far = build::udp_v4([10, 0, 0, 1], [10, 9, 1, 1], 1, 2, &[7u8; 1000]);
        let batch = frames(vec![far.clone(); 10]);
        let mut plan = TxPlan::new();
        tx.set_now(ms);
        tx.process_vm_batch(1, &batch, &mut plan);
        assert_eq!(plan.outs.len(), 10);
        // Every datagram carries port 1's next sequence number; the inner
        // frame is untouched.
        let msgs: Vec<Vec<u8>> = plan.outs.iter().map(|o| plan.message(&batch, o)).collect();
        for (k, m) in msgs.iter().enumerate() {
            let p = parse_fabric_payload(m).unwrap();
            let o = p.seq.unwrap();
            assert_eq!((o.port, o.seq, o.sent_us), (1, k as u32, 1000));
            assert_eq!(&m[p.inner_at..], &far[..]);
        }
        // Host 3 gets numbers 0-3 and 6-9: 4 and 5 were lost on the way.
        let got: Vec<Vec<u8>> = msgs
            .iter()
            .enumerate()
            .filter(|(k, _)| *k != 4 && *k != 5)
            .map(|(_, m)| m.clone())
            .collect();
        let mut plan3 = TxPlan::new();
        rx.set_now(ms);
        rx.process_udp_batch(
            &from(SocketAddrV4::new(underlay(1), GENEVE_PORT), got),
            &mut plan3,
        );
        assert_eq!(plan3.outs.len(), 0, "no VM on host 3 has 10.9.1.1");
        // The report is due one period later, not before.
        let due = rx.next_deadline().unwrap();
        rx.set_now(due - 1);
        plan3.clear();
        rx.seawall_tick(&mut plan3);
        assert!(plan3.is_empty());
        rx.set_now(due);
        rx.seawall_tick(&mut plan3);
        assert_eq!(plan3.outs.len(), 1);
        assert_eq!(
            plan3.outs[0].dest,
            Dest::Udp(SocketAddrV4::new(underlay(1), GENEVE_PORT))
        );
        let empty: Vec<(Vec<u8>, Option<SocketAddrV4>)> = Vec::new();
        let fb = plan3.message(&empty, &plan3.outs[0]);
        let reports: Vec<_> = sluice_seawall::wire::decode_feedback(&fb)
            .unwrap()
            .collect();
        assert_eq!(reports.len(), 1);
        assert_eq!(
            (reports[0].port, reports[0].received, reports[0].lost),
            (1, 8, 2)
        );
        assert_eq!(rx.stats().seawall_feedback_sent, 1);

        // Host 1 applies it: port 1's rate to host 3 falls below what it sent
        // (10 kB in 1 ms... 80 Mbit/s), far below the 1 Gbit/s it started at.
        tx.set_now(due);
        plan.clear();
        tx.process_udp_batch(
            &from(
                SocketAddrV4::new(underlay(3), GENEVE_PORT),
                vec![fb.clone()],
            ),
            &mut plan,
        );
        assert!(plan.is_empty());
        assert_eq!(tx.stats().seawall_feedback_received, 1);
        let ents = tx.seawall_entities();
        assert_eq!(ents.len(), 1);
        let (e, rate, st) = ents[0];
        assert_eq!((e.port, e.host), (1, 3));
        assert!(rate < 100_000_000, "rate {rate}");
        assert_eq!(
            (st.reported_received, st.reported_lost, st.decreases),
            (8, 2, 1)
        );
        // A flood now: what is over the rate waits at host 1 (its queue), the
        // rest of it is dropped there, counted as rate_limited against the
        // sending port.
        let flood = frames(vec![far.clone(); 64]);
        let mut sent = 0;
        for k in 0..20u64 {
            plan.clear();
            tx.set_now(due + k * 10_000);
            tx.process_vm_batch(1, &flood, &mut plan);
            sent += plan.outs.len();
        }
        let policed = tx.stats().drops_of(DropReason::RateLimited);
        let waiting = tx.seawall_entities()[0].2.queue_packets_now;
        assert_eq!(sent as u64 + policed + waiting, 20 * 64);
        assert!(
            policed > 900 && waiting > 100,
            "policed {policed}, waiting {waiting}"
        );
        assert_eq!(tx.stats().ports[&1].drops, policed);
        // The waiting packets leave as their tokens come, from the tick, with
        // headers and numbers as if sent directly.
        let empty: Vec<(Vec<u8>, Option<SocketAddrV4>)> = Vec::new();
        let mut next_seq = 10 + sent as u32;
        let mut left = 0;
        while let Some(d) = tx.next_deadline() {
            plan.clear();
            tx.set_now(d);
            tx.seawall_tick(&mut plan);
            for o in &plan.outs {
                assert_eq!(
                    o.dest,
                    Dest::Udp(SocketAddrV4::new(underlay(3), GENEVE_PORT))
                );
                let m = plan.message(&empty, o);
                let p = parse_fabric_payload(&m).unwrap();
                let so = p.seq.unwrap();
                assert_eq!(
                    (so.port, so.seq, so.sent_us),
                    (1, next_seq, (d / 1000) as u32)
                );
                assert_eq!(&m[p.inner_at..], &far[..]);
                next_seq += 1;
                left += 1;
            }
        }
        assert_eq!(left, waiting);
        // Host 3, which reported before, said nothing while they left (over
        // four periods): that silence counts as loss, and the rate was cut
        // again.
        let (_, after, st) = tx.seawall_entities()[0];
        assert!(after < rate && st.decreases >= 2, "{after} {st:?}");
        let rate = after;
        // Local delivery is never rate-controlled.
        plan.clear();
        let near = with_macs(
            build::udp_v4([10, 0, 0, 1], [10, 0, 0, 2], 1, 2, &[1u8; 1000]),
            ROUTER_MAC,
            [2, 0, 0, 0, 1, 1],
        );
        tx.process_vm_batch(1, &frames(vec![near; 64]), &mut plan);
        assert_eq!(plan.outs.len(), 64);
        // A garbled report is counted as malformed and changes nothing.
        let mut bad = fb.clone();
        bad.truncate(bad.len() - 3);
        plan.clear();
        tx.process_udp_batch(
            &from(SocketAddrV4::new(underlay(3), GENEVE_PORT), vec![bad]),
            &mut plan,
        );
        assert_eq!(tx.stats().drops_of(DropReason::Malformed), 1);
        assert_eq!(tx.seawall_entities()[0].1, rate);
        // A new configuration keeps the controllers and the numbering.
        let mut next = Dataplane::new(1, &two_vms()).unwrap();
        next.inherit_stats(&tx);
        assert!(next.seawall_on());
        assert_eq!(next.seawall_entities()[0].1, rate);
        // Each VM port's weight reaches the controllers.
        let w = |dp: &Dataplane, port: u16| dp.seawall.as_ref().unwrap().weight(port);
        assert_eq!((w(&next, 1), w(&next, 2)), (1, 2));
    }

    #[test]
    fn chains_entered_at_vms_are_metered_and_handshakes_timed() {
        let mut cfg = two_vms();
        // Traffic to VM 2 is chain 4 (no middlebox): it enters the chain at VM 1.
        cfg.tenants[0].entries[1]
            .actions
            .insert(0, Action::SetChainHop { chain: 4, hop: 1 });
        let mut dp = Dataplane::new(1, &cfg).unwrap();
        let mut plan = TxPlan::new();
        let tcp = |src: [u8; 4], dst: [u8; 4], sp: u16, dp_: u16, flags: u8| {
            with_macs(
                build::tcp_v4(src, dst, sp, dp_, 1, 0, flags, b""),
                ROUTER_MAC,
                [2, 0, 0, 0, 1, src[3]],
            )
        };
        dp.set_now(1_000_000);
        let syn = tcp([10, 0, 0, 1], [10, 0, 0, 2], 5555, 80, SYN);
        dp.process_vm_batch(1, &frames(vec![syn.clone(), syn.clone()]), &mut plan);
        assert_eq!(plan.outs.len(), 2, "both delivered");
        dp.set_now(3_500_000);
        plan.clear();
        let syn_ack = tcp([10, 0, 0, 2], [10, 0, 0, 1], 80, 5555, SYN | 0x10);
        dp.process_vm_batch(2, &frames(vec![syn_ack]), &mut plan);
        assert_eq!(plan.outs.len(), 1);
        let m = dp.chain_measures();
        assert_eq!(m.len(), 1, "the reply is in no chain: {m:?}");
        assert_eq!((m[0].vni, m[0].chain), (7, 4));
        assert_eq!((m[0].packets, m[0].bytes), (2, 2 * syn.len() as u64));
        assert_eq!(m[0].syns, 2);
        assert_eq!((m[0].handshakes, m[0].handshake_ns), (1, 2_500_000));
        // A new configuration keeps the counters.
        let mut next = Dataplane::new(1, &cfg).unwrap();
        next.inherit_stats(&dp);
        assert_eq!(next.chain_measures()[0].handshakes, 1);
    }

    #[test]
    fn arp_requests_are_answered_from_the_router_mac() {
        let mut dp = Dataplane::new(1, &two_vms()).unwrap();
        let mut plan = TxPlan::new();
        let vm_mac = [2, 0, 0, 0, 1, 1];
        let mut req = vec![0xff; 6];
        req.extend_from_slice(&vm_mac);
        req.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
        req.extend_from_slice(&vm_mac);
        req.extend_from_slice(&[10, 0, 0, 1]);
        req.extend_from_slice(&[0; 6]);
        req.extend_from_slice(&[169, 254, 0, 1]);
        let batch = frames(vec![req.clone()]);
        dp.process_vm_batch(1, &batch, &mut plan);
        assert_eq!(plan.outs.len(), 1);
        assert_eq!(plan.outs[0].dest, Dest::Vm(1));
        let r = plan.message(&batch, &plan.outs[0]);
        assert_eq!(r.len(), 42);
        assert_eq!(&r[..6], &vm_mac);
        assert_eq!(&r[6..12], &ROUTER_MAC);
        assert_eq!(&r[20..22], &[0, 2], "a reply");
        assert_eq!(&r[22..28], &ROUTER_MAC);
        assert_eq!(&r[28..32], &[169, 254, 0, 1]);
        assert_eq!(&r[32..38], &vm_mac);
        assert_eq!(&r[38..42], &[10, 0, 0, 1]);
        // A reply, a truncated request and a non-IPv4 request get nothing.
        let mut reply = req.clone();
        reply[21] = 2;
        let mut short = req.clone();
        short.truncate(30);
        let mut v6 = req.clone();
        v6[16] = 0x86;
        plan.clear();
        dp.process_vm_batch(1, &frames(vec![reply, short, v6]), &mut plan);
        assert!(plan.outs.is_empty());
        assert_eq!(dp.stats().drops_of(DropReason::Malformed), 2);
    }

    #[test]
    fn garbage_is_counted_and_dropped() {
        let mut dp = Dataplane::new(1, &two_vms()).unwrap();
        let mut plan = TxPlan::new();
        let good = build::udp_v4([10, 0, 0, 1], [10, 0, 0, 2], 1, 2, b"x");
        let mut bad_ip = good.clone();
        bad_ip[14] = 0x47; // IPv4 with a header length past the frame
        let batch = frames(vec![
            vec![],
            vec![1, 2, 3],
            bad_ip,
            build::udp_v4([10, 0, 0, 1], [192, 0, 2, 1], 1, 2, b"nowhere"),
        ]);
        dp.process_vm_batch(1, &batch, &mut plan);
        assert!(plan.outs.is_empty());
        let s = dp.stats();
        assert_eq!(s.drops_of(DropReason::Malformed), 3);
        assert_eq!(s.drops_of(DropReason::NoMatch), 1);
        assert_eq!(s.ports[&1].drops, 4);
        assert_eq!(s.ports[&1].rx_packets, 4);

        let peer = SocketAddrV4::new(underlay(2), GENEVE_PORT);
        let stranger = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 9), GENEVE_PORT);
        let mut critical = encap(7, None, &good);
        critical[0] = 1;
        critical[1] = 0x40;
        critical.splice(8..8, [0x01, 0x01, 0x80, 0x00]);
        let batch = vec![
            (vec![0u8; 3], Some(peer)),
            (encap(7, None, &good), Some(stranger)),
            (encap(7, None, &good), None),
            (critical, Some(peer)),
            (encap(99, None, &good), Some(peer)),
            (encap(7, None, &[0u8; 5]), Some(peer)),
        ];
        plan.clear();
        dp.process_udp_batch(&batch, &mut plan);
        assert!(plan.outs.is_empty());
        let s = dp.stats();
        assert_eq!(s.drops_of(DropReason::UnknownSource), 2);
        assert_eq!(s.drops_of(DropReason::Malformed), 3 + 3);
        assert_eq!(s.drops_of(DropReason::NoMatch), 2, "vni 99 has no FIB here");
        assert_eq!(s.fabric.rx_packets, 6);
        assert_eq!(s.fabric.drops, 6);
        // Frames from a port that left the config.
        dp.process_vm_batch(9, &frames(vec![good]), &mut plan);
        assert!(plan.outs.is_empty());
    }

    #[test]
    fn instances_may_not_speak_for_other_tenants() {
        let mut dp = Dataplane::new(1, &figure4_host1()).unwrap();
        let mut plan = TxPlan::new();
        let f = build::tcp_v4([198, 51, 100, 1], VIP_A, 1, 80, 1, 0, SYN, b"");
        let batch = from(inst_addr(10), vec![encap(43, Some((0, 1)), &f)]);
        dp.process_udp_batch(&batch, &mut plan);
        assert!(plan.outs.is_empty());
        assert_eq!(dp.stats().drops_of(DropReason::WrongVni), 1);
    }

    #[test]
    fn bad_configs_are_refused_whole() {
        let good = two_vms();
        assert!(Dataplane::new(1, &good).is_ok());
        assert_eq!(
            Dataplane::new(2, &good).unwrap_err(),
            ConfigError::WrongHost { got: 1, want: 2 }
        );
        let mut c = good.clone();
        c.tenants[0].entries[0].actions = vec![Action::Select(GroupId(9))];
        assert!(matches!(
            Dataplane::new(1, &c),
            Err(ConfigError::Fib { .. })
        ));
        let mut c = good.clone();
        c.ports[1].id = 1;
        assert_eq!(
            Dataplane::new(1, &c).unwrap_err(),
            ConfigError::DuplicatePort(1)
        );
        let mut c = good.clone();
        if let PortKind::Vm { mac, .. } = &mut c.ports[0].kind {
            *mac = "02:00:zz:00:00:01".into();
        }
        assert!(matches!(
            Dataplane::new(1, &c),
            Err(ConfigError::BadMac { .. })
        ));
        let mut c = good.clone();
        if let PortKind::Vm { iface, .. } = &mut c.ports[0].kind {
            *iface = "a-very-long-interface-name".into();
        }
        assert!(matches!(
            Dataplane::new(1, &c),
            Err(ConfigError::BadIface { .. })
        ));
        let mut c = good;
        c.ports.push(PortConfig {
            id: 0,
            vni: 7,
            kind: PortKind::Instance { name: "x".into() },
        });
        assert_eq!(
            Dataplane::new(1, &c).unwrap_err(),
            ConfigError::NoInstanceLink(0)
        );
    }

    #[test]
    fn counters_survive_a_new_config() {
        let mut dp = Dataplane::new(1, &two_vms()).unwrap();
        let mut plan = TxPlan::new();
        let f = build::udp_v4([10, 0, 0, 1], [10, 0, 0, 2], 1, 2, b"x");
        dp.process_vm_batch(1, &frames(vec![f]), &mut plan);
        let mut next = Dataplane::new(1, &two_vms()).unwrap();
        next.inherit_stats(&dp);
        assert_eq!(next.stats().ports[&1].rx_packets, 1);
    }

    fn heartbeat_from(port: u16) -> Vec<(Vec<u8>, Option<SocketAddrV4>)> {
        let hb = InstanceHeartbeat {
            seq: 1,
            rx_packets: 5,
            ..InstanceHeartbeat::default()
        };
        from(inst_addr(port), vec![hb.encode().to_vec()])
    }

    /// The destination of a client SYN from 198.51.100.`i` on the gateway port
    /// (the firewall copy; the monitor's copy comes first).
    fn fw_dest(dp: &mut Dataplane, i: u8) -> Option<Dest> {
        let syn = with_macs(
            build::tcp_v4(
                [198, 51, 100, i],
                VIP_A,
                40_000 + i as u16,
                80,
                1,
                0,
                SYN,
                b"",
            ),
            ROUTER_MAC,
            GW_MAC,
        );
        let mut plan = TxPlan::new();
        dp.process_vm_batch(1, &frames(vec![syn]), &mut plan);
        plan.outs
            .iter()
            .map(|o| o.dest)
            .find(|d| *d != Dest::Udp(inst_addr(12)))
    }

    #[test]
    fn a_silent_instance_is_failed_over_and_rejoins() {
        let mut dp = Dataplane::new(1, &figure4_host1()).unwrap();
        let ms = 1_000_000u64;
        dp.set_now(990 * ms);
        ready(&mut dp, &[10, 11, 12]);
        let host2 = Dest::Udp(SocketAddrV4::new(underlay(2), GENEVE_PORT));
        let before: Vec<Option<Dest>> = (1..=60).map(|i| fw_dest(&mut dp, i)).collect();
        assert!(before.contains(&Some(Dest::Udp(inst_addr(10)))));
        assert!(before.contains(&Some(host2)));
        // Heartbeats, then silence past the timeout.
        dp.set_now(1000 * ms);
        let mut plan = TxPlan::new();
        dp.process_udp_batch(&heartbeat_from(10), &mut plan);
        assert!(plan.outs.is_empty(), "heartbeats are not forwarded");
        assert_eq!(dp.stats().heartbeats, 4);
        assert_eq!(dp.next_deadline(), Some(1020 * ms), "ports 11 and 12");
        dp.set_now(1015 * ms);
        ready(&mut dp, &[11, 12]);
        assert_eq!(dp.next_deadline(), Some(1030 * ms));
        assert!(!dp.check_health(1020 * ms, || 1020 * ms));
        assert!(dp.check_health(1031 * ms, || 1031 * ms + 5_000));
        assert!(dp.suspected(10));
        let e = &dp.failover_events()[0];
        assert_eq!(e.port, 10);
        assert_eq!(e.suspected_at_us, 1_030_000);
        assert_eq!(e.applied_at_us, 1_031_005);
        assert_eq!(e.groups, 1);
        // The firewall's traffic now goes to host 2; nothing else moved.
        for (i, b) in (1..=60).zip(&before) {
            assert_eq!(fw_dest(&mut dp, i), Some(host2), "flow {i} (was {b:?})");
        }
        // From the fabric, a packet for the firewall has no local instance left.
        let f = build::tcp_v4([198, 51, 100, 1], VIP_A, 1, 80, 1, 0, SYN, b"");
        let peer = SocketAddrV4::new(underlay(2), GENEVE_PORT);
        let (chain, _) = {
            let mut p = TxPlan::new();
            let mut d2 = Dataplane::new(1, &figure4_host1()).unwrap();
            let batch = frames(vec![with_macs(f.clone(), ROUTER_MAC, GW_MAC)]);
            d2.process_vm_batch(1, &batch, &mut p);
            parse(&p.message(&batch, p.outs.last().unwrap()))
                .chain_hop
                .unwrap()
        };
        plan.clear();
        dp.process_udp_batch(
            &from(peer, vec![encap(VNI, Some((chain, 1)), &f)]),
            &mut plan,
        );
        assert!(
            plan.outs.iter().all(|o| o.dest != host2),
            "never bounced back"
        );
        assert_eq!(dp.stats().drops_of(DropReason::NoLiveInstance), 1);
        // An exit noticed after the timeout changes nothing more.
        assert!(!dp.instance_exited(10, 1040 * ms, || 1040 * ms));
        assert!(dp.instance_exited(11, 1040 * ms, || 1040 * ms));
        assert_eq!(dp.failover_events()[1].reason, "exited");
        dp.set_now(1041 * ms);
        ready(&mut dp, &[11]);
        assert!(!dp.suspected(11));
        // A new configuration keeps the suspicion.
        let mut next = Dataplane::new(1, &figure4_host1()).unwrap();
        next.inherit_stats(&dp);
        assert!(next.suspected(10));
        assert_eq!(fw_dest(&mut next, 1), Some(host2));
        // Heartbeats resume: it rejoins and gets its flows back.
        next.set_now(1200 * ms);
        plan.clear();
        next.process_udp_batch(&heartbeat_from(10), &mut plan);
        assert!(!next.suspected(10));
        assert_eq!(next.failover_events()[0].rejoined_at_us, Some(1_200_000));
        for (i, b) in (1..=60).zip(&before) {
            assert_eq!(fw_dest(&mut next, i), *b);
        }
        let h = next.health_report();
        let fw = h.iter().find(|h| h.port == 10).unwrap();
        assert_eq!(
            (fw.rx_packets, fw.suspected, fw.last_heartbeat_age_ms),
            (5, false, Some(0))
        );
    }

    /// Firewall instances on ports 5 and 6 (with these weights) in group 1,
    /// selected by the client VM on port 1, with the group's policy.
    fn fw_group(
        weights: &[(u16, u32)],
        draining: Vec<u16>,
        pinned: bool,
        local_state: bool,
    ) -> AgentConfig {
        let mut c = two_vms();
        let targets: Vec<(Output, u32)> = weights
            .iter()
            .map(|&(p, w)| (Output::Port(PortId(p)), w))
            .collect();
        c.tenants[0].groups = vec![(1, sluice_switch::Group::split(&targets).unwrap())];
        c.tenants[0].entries.insert(
            0,
            Entry {
                id: 9,
                priority: 100,
                m: Match {
                    in_port: Some(PortId(1)),
                    ..Match::default()
                },
                actions: vec![Action::Select(GroupId(1))],
            },
        );
        for p in [5u16, 6] {
            c.ports.push(PortConfig {
                id: p,
                vni: 7,
                kind: PortKind::Instance {
                    name: format!("t/fw/{p}"),
                },
            });
        }
        c.group_policies = vec![sluice_proto::GroupPolicy {
            vni: 7,
            group: 1,
            pinned,
            draining: draining
                .into_iter()
                .map(|p| Output::Port(PortId(p)))
                .collect(),
            local_state,
            cached: false,
            lease_epoch: 0,
        }];
        c
    }

    /// The lease answers in `plan`, by destination.
    fn leases_in(plan: &TxPlan) -> Vec<(Dest, sluice_proto::InstanceLease)> {
        plan.outs
            .iter()
            .filter_map(|o| sluice_proto::InstanceLease::decode(plan.head(o)).map(|l| (o.dest, l)))
            .collect()
    }

    #[test]
    fn instances_of_a_leased_group_get_leases_on_exactly_their_ranges() {
        let ms = 1_000_000u64;
        let mut c = fw_group(&[(5, 1), (6, 3)], vec![], false, false);
        c.group_policies[0].lease_epoch = 77;
        let mut dp = Dataplane::new(1, &c).unwrap();
        let g = c.tenants[0].groups[0].1.clone();
        let want5 = vec![(0u32, (g.ranges[0].0 - 1) as u32)];
        let want6 = vec![(g.ranges[0].0 as u32, u32::MAX)];
        let beat = |dp: &mut Dataplane, now: u64, ports: &[u16]| {
            dp.set_now(now);
            let mut plan = TxPlan::new();
            for p in ports {
                dp.process_udp_batch(&heartbeat_from(*p), &mut plan);
            }
            leases_in(&plan)
        };
        // The controller has not been heard from: nothing.
        assert!(beat(&mut dp, 1000 * ms, &[5, 6]).is_empty());
        dp.allow_leases_until(5000 * ms);
        // Conditions hold from now; leases only after the drain time.
        assert!(beat(&mut dp, 1001 * ms, &[5, 6]).is_empty());
        assert!(beat(&mut dp, 1040 * ms, &[5, 6]).is_empty());
        let got = beat(&mut dp, 1001 * ms + LEASE_DRAIN_NS, &[5, 6]);
        assert_eq!(got.len(), 2);
        for (dest, l) in &got {
            let want = if *dest == Dest::Udp(inst_addr(5)) {
                &want5
            } else {
                &want6
            };
            assert_eq!(&l.ranges, want, "{dest:?}");
            assert_eq!((l.epoch, l.hb_seq), (77, 1));
            assert!(
                u64::from(l.valid_us) * 1000 < DEFAULT_SUSPECT_NS,
                "ends before suspicion"
            );
        }
        assert_eq!(dp.stats().leases, 2);
        // Port 5 falls silent and is suspected: its range moves to port 6, which
        // keeps exactly its own lease (the moved flows go to the store).
        let t = 1001 * ms + LEASE_DRAIN_NS;
        assert!(beat(&mut dp, t + 20 * ms, &[6]).len() == 1);
        assert!(dp.check_health(t + 40 * ms, || t + 40 * ms));
        let got = beat(&mut dp, t + 41 * ms, &[6]);
        assert_eq!(
            got,
            vec![(
                Dest::Udp(inst_addr(6)),
                sluice_proto::InstanceLease {
                    epoch: 77,
                    hb_seq: 1,
                    valid_us: (LEASE_VALID_NS / 1000) as u32,
                    ranges: want6.clone(),
                }
            )]
        );
        // Port 5 comes back: no lease until its flows sent elsewhere drained
        // (told its old one is over, in case it still counts on it).
        let got = beat(&mut dp, t + 50 * ms, &[5]);
        assert!(got.iter().all(|(_, l)| l.epoch == 0), "{got:?}");
        assert!(beat(&mut dp, t + 60 * ms, &[5]).is_empty());
        assert_eq!(beat(&mut dp, t + 50 * ms + LEASE_DRAIN_NS, &[5]).len(), 1);
        // The controller revokes (epoch 0): holders are told at their next beat.
        c.group_policies[0].lease_epoch = 0;
        let mut next = Dataplane::new(1, &c).unwrap();
        next.inherit_stats(&dp);
        let got = beat(&mut next, t + 200 * ms, &[5, 6]);
        assert_eq!(got.len(), 2);
        assert!(got.iter().all(|(_, l)| l.epoch == 0 && l.ranges.is_empty()));
        assert_eq!(
            next.stats().lease_revocations,
            3,
            "port 5 was told once before"
        );
        assert!(
            beat(&mut next, t + 210 * ms, &[5, 6]).is_empty(),
            "told once"
        );
        // A new epoch is granted after the drain time; silence from the
        // controller past its grace stops grants.
        c.group_policies[0].lease_epoch = 78;
        let mut again = Dataplane::new(1, &c).unwrap();
        again.inherit_stats(&next);
        assert!(beat(&mut again, t + 300 * ms, &[5, 6]).is_empty());
        assert_eq!(
            beat(&mut again, t + 300 * ms + LEASE_DRAIN_NS, &[5, 6]).len(),
            2
        );
        let got = beat(&mut again, 5001 * ms, &[5, 6]);
        assert!(got.iter().all(|(_, l)| l.epoch == 0), "revoked: {got:?}");
        // Pinned or local-state groups never lease.
        for (pinned, local) in [(true, false), (false, true)] {
            let mut c = fw_group(&[(5, 1), (6, 1)], vec![], pinned, local);
            c.group_policies[0].lease_epoch = 9;
            let mut dp = Dataplane::new(1, &c).unwrap();
            dp.allow_leases_until(u64::MAX);
            assert!(beat(&mut dp, 1000 * ms, &[5, 6]).is_empty());
            assert!(beat(&mut dp, 1000 * ms + LEASE_DRAIN_NS, &[5, 6]).is_empty());
        }
    }

    #[test]
    fn local_state_groups_fail_over_an_exited_instance_but_not_a_silent_one() {
        let ms = 1_000_000u64;
        let dest = |dp: &mut Dataplane, i: u16| {
            let f = build::tcp_v4([10, 0, 0, 1], [10, 0, 9, 9], 1000 + i, 80, 1, 0, SYN, b"");
            let mut plan = TxPlan::new();
            dp.process_vm_batch(1, &frames(vec![f]), &mut plan);
            plan.outs[0].dest
        };
        let (p5, p6) = (Dest::Udp(inst_addr(5)), Dest::Udp(inst_addr(6)));
        for (pinned, local) in [(true, true), (false, true), (false, false)] {
            let mut dp =
                Dataplane::new(1, &fw_group(&[(5, 1), (6, 1)], vec![], pinned, local)).unwrap();
            dp.set_now(1000 * ms);
            ready(&mut dp, &[5, 6]);
            let before: Vec<Dest> = (0..100).map(|i| dest(&mut dp, i)).collect();
            assert!(before.contains(&p5) && before.contains(&p6));
            // Port 5 falls silent past the suspicion timeout; 6 keeps talking.
            dp.set_now(1040 * ms);
            ready(&mut dp, &[6]);
            dp.check_health(1041 * ms, || 1041 * ms);
            assert!(dp.suspected(5));
            let silent: Vec<Dest> = (0..100).map(|i| dest(&mut dp, i)).collect();
            if local {
                assert_eq!(
                    silent, before,
                    "pinned={pinned}: a slow local-state instance keeps its flows"
                );
            } else {
                assert!(silent.iter().all(|d| *d == p6), "shared state fails over");
            }
            // Its process exits: now its flows go to the survivor.
            dp.instance_exited(5, 1050 * ms, || 1050 * ms);
            assert!((0..100).all(|i| dest(&mut dp, i) == p6), "pinned={pinned}");
            // It is restarted and heartbeats again: new flows may use it.
            dp.set_now(1060 * ms);
            ready(&mut dp, &[5, 6]);
            assert!(!dp.suspected(5));
            let later: Vec<Dest> = (100..300).map(|i| dest(&mut dp, i)).collect();
            assert!(later.contains(&p5), "pinned={pinned}");
        }
    }

    #[test]
    fn pinned_groups_keep_flows_across_a_new_split() {
        // Two local firewall instances (ports 5 and 6), pinned; the client VM on
        // port 1 selects among them.
        let cfg =
            |weights: &[(u16, u32)], draining: Vec<u16>| fw_group(weights, draining, true, true);
        let dest = |dp: &mut Dataplane, i: u16| {
            let f = build::tcp_v4([10, 0, 0, 1], [10, 0, 9, 9], 1000 + i, 80, 1, 0, SYN, b"");
            let mut plan = TxPlan::new();
            dp.process_vm_batch(1, &frames(vec![f]), &mut plan);
            plan.outs[0].dest
        };
        let (p5, p6) = (Dest::Udp(inst_addr(5)), Dest::Udp(inst_addr(6)));
        let mut dp = Dataplane::new(1, &cfg(&[(5, 1)], vec![])).unwrap();
        for i in 0..100 {
            assert_eq!(dest(&mut dp, i), p5);
        }
        // Scale out: old flows stay on 5, new ones split.
        let mut next = Dataplane::new(1, &cfg(&[(5, 1), (6, 1)], vec![])).unwrap();
        next.inherit_stats(&dp);
        for i in 0..100 {
            assert_eq!(dest(&mut next, i), p5);
        }
        let new: Vec<Dest> = (100..300).map(|i| dest(&mut next, i)).collect();
        assert!(new.contains(&p6) && new.contains(&p5));
        // Drain 5: no new flows, its own stay; status counts them.
        let mut drain = Dataplane::new(1, &cfg(&[(6, 1)], vec![5])).unwrap();
        drain.inherit_stats(&next);
        for i in 0..100 {
            assert_eq!(dest(&mut drain, i), p5);
        }
        for i in 300..400 {
            assert_eq!(dest(&mut drain, i), p6);
        }
        let pins = drain.pinned_flows();
        let on5 = pins
            .iter()
            .find(|p| p.target == Output::Port(PortId(5)))
            .unwrap();
        assert!(on5.draining);
        let n5 = new.iter().filter(|d| **d == p5).count() as u64;
        assert_eq!(on5.flows, 100 + n5);
    }

    #[test]
    fn macs_parse() {
        assert_eq!(parse_mac("02:53:4c:00:00:01"), Some(ROUTER_MAC));
        assert_eq!(parse_mac("02:53:4c:00:00"), None);
        assert_eq!(parse_mac("02:53:4c:00:00:01:02"), None);
        assert_eq!(parse_mac("02:53:4c:00:00:1ff"), None);
        assert!(valid_iface("sl4711h1p12"));
        assert!(!valid_iface("a/b") && !valid_iface("") && !valid_iface("0123456789abcdef"));
    }
}
