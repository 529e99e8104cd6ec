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
//! * the controller pushes each host's configuration to its agent whenever it
//!   changes, and again when a heartbeat shows the agent runs another version:
//!   the changes since the version the agent acknowledged
//!   (`PATCH {api}/v1/config`, [`ConfigDelta`]), or the whole configuration
//!   (`PUT {api}/v1/config`, [`AgentConfig`]) on first contact, after the
//!   agent restarted, or when the agent runs another version than the delta's
//!   base (it answers 409);
//! * the agent reports its counters, its NF instances' health, its local failovers
//!   and its pinned flows at `GET {api}/v1/status` ([`AgentStatus`]) and in
//!   Prometheus text format at `GET {api}/metrics`; its heartbeat to the controller
//!   ([`HostHeartbeat`], every 50 ms in a small fleet, less often in a large one:
//!   the controller's answer tells the interval, [`heartbeat_interval`]) carries
//!   the instances' health too;
//! * each NF instance sends its agent an [`InstanceHeartbeat`] datagram every 10 ms
//!   (UDP, from its data socket to the agent's Geneve address; not Geneve: it
//!   starts with [`HEARTBEAT_MAGIC`]).
//!
//! The agent keeps forwarding with the last configuration it accepted while the
//! controller is unreachable: configuration is state pushed to it, never fetched per
//! packet.

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};
use sluice_switch::{Entry, Group, Output};

mod delta;
pub use delta::{Added, ConfigDelta, DeltaError, FabricAuthDelta, ListDelta};

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
    /// The secret the controller must send (`Authorization: Bearer`) to
    /// change this agent's configuration; drawn by the agent at each start.
    /// Absent: the agent's API is open (tests, agents from before the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_token: Option<String>,
    /// What the host offers NF instances (absent: no limit, as agents from
    /// before the field are treated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<HostCapacity>,
    /// A certificate request (PEM) for the agent's API: the controller answers
    /// with a certificate from the hosts' CA (the answer's `api_cert`). Sent
    /// until the agent holds a certificate, and again to renew it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_csr: Option<String>,
}

/// What a host offers NF instances, declared at registration; the controller
/// places no instance that would exceed it. Each limit is optional (absent: not
/// limited).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostCapacity {
    /// How many instance slots the host has (an instance takes its
    /// middlebox's `resources.slots`, 1 unless the spec says otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_slots: Option<u32>,
    /// CPU cores available to NF instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores: Option<u32>,
    /// Memory available to NF instances, MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    /// The rack (or any locality / failure domain) the host is in: rack-aware
    /// placement puts a middlebox's instances in the racks of its chains' VMs.
    /// Absent: no known locality (agents from before the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<String>,
    /// The capacity of the link joining the host's rack to the rest of the
    /// network (its uplink), Mbit/s, as this host knows it: network-aware
    /// distribution weighs the rack's uplink by it unless the controller's
    /// `rack_uplink` declares the rack (the largest a rack's hosts declare
    /// counts). Absent: not declared here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack_uplink_mbit: Option<u64>,
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
    /// How the agent chooses among a group's targets beyond the plain hash split
    /// (flow pinning, draining targets); groups not listed are plain hash splits.
    #[serde(default)]
    pub group_policies: Vec<GroupPolicy>,
    /// Authenticated encapsulation between hosts: when present, every Geneve
    /// datagram to or from a peer is sealed (AES-256-GCM) with the keys of
    /// that ordered host pair, and unsealed ones are dropped. Secret: the
    /// controller redacts it from every API that shows configurations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric_auth: Option<FabricAuth>,
    /// Operators' releases of hosts accused of ignoring congestion feedback
    /// (Seawall §4): the agent forgets its own accusations of a host whose
    /// generation here is higher than in its previous configuration.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pardons: Vec<Pardon>,
    /// Active health checks of load-balancer backends that are VMs on this
    /// host: the agent probes each through the VM's port and reports the
    /// results in its heartbeat ([`HostHeartbeat::backend_checks`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub health_checks: Vec<HealthCheck>,
}

/// The source address of the agents' health-check probes (link-local, never a
/// tenant's: no tenant rule or flow record sees a probe). VMs must answer it
/// through their default route, as they reach everything else.
pub const PROBE_SOURCE: Ipv4Addr = Ipv4Addr::new(169, 254, 83, 1);

/// One backend an agent checks ([`AgentConfig::health_checks`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthCheck {
    /// Tenant of the load balancer.
    pub tenant: String,
    /// The load balancer (middlebox name).
    pub middlebox: String,
    /// The backend as the load balancer's configuration names it.
    pub backend: String,
    /// The VM port the backend's VM is on.
    pub port: u16,
    /// The backend's address (the VM's).
    pub addr: Ipv4Addr,
    /// The TCP port checked.
    pub tcp_port: u16,
    /// For an HTTP check: the path of the `GET` sent after the handshake
    /// (a 2xx or 3xx status passes). `None`: the handshake alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_path: Option<String>,
    /// Time between the starts of two checks, ms.
    pub interval_ms: u64,
    /// A check not answered within this long fails, ms.
    pub timeout_ms: u64,
}

/// How a health check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckOutcome {
    /// SYN-ACK (a TCP check), or a 2xx/3xx status line (HTTP).
    Ok,
    /// RST: nothing listens on the port (or the server reset the request).
    Refused,
    /// No answer within the timeout.
    Timeout,
    /// An HTTP check answered with a status that is not 2xx or 3xx (or with
    /// something that is no status line: 0).
    Status(u16),
}

impl std::fmt::Display for CheckOutcome {
    /// How an event names it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckOutcome::Ok => f.write_str("passed"),
            CheckOutcome::Refused => f.write_str("RST"),
            CheckOutcome::Timeout => f.write_str("timeout"),
            CheckOutcome::Status(0) => f.write_str("no HTTP status line"),
            CheckOutcome::Status(s) => write!(f, "HTTP {s}"),
        }
    }
}

/// What an agent's checks of one backend found so far
/// ([`HostHeartbeat::backend_checks`]; counters cumulative since the agent
/// started or the check was configured).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendCheck {
    /// Tenant of the load balancer.
    pub tenant: String,
    /// The load balancer.
    pub middlebox: String,
    /// The backend as the configuration names it.
    pub backend: String,
    /// What was checked, `tcp addr:port` or `http addr:port/path` (for
    /// messages).
    pub target: String,
    /// Checks that passed.
    pub ok: u64,
    /// Checks that failed.
    pub failed: u64,
    /// The last check's outcome (none yet: `None`).
    pub last: Option<CheckOutcome>,
}

/// An operator cleared host `host` of accusations ([`AgentConfig::pardons`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pardon {
    /// The host cleared.
    pub host: u32,
    /// How many times an operator has released it (rises with each release).
    pub generation: u64,
}

/// The keys of this host's fabric links, one entry per peer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FabricAuth {
    /// Per peer host.
    pub peers: Vec<PeerKeys>,
}

/// The keys between this host and one peer (each direction its own key).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerKeys {
    /// The peer's host id.
    pub host: u32,
    /// Seals what this host sends to the peer.
    pub tx: FabricKey,
    /// Open what the peer sends here: at most two, the current key and,
    /// during a rotation, the one before it.
    pub rx: Vec<FabricKey>,
}

/// One AES-256-GCM key and its id (carried in every datagram it seals).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FabricKey {
    /// Key id.
    pub id: u8,
    /// 32 bytes, hex (64 digits).
    pub key: String,
}

impl FabricAuth {
    /// The same peers and key ids with every key replaced by `"redacted"`
    /// (what an API that shows configurations returns).
    pub fn redacted(&self) -> FabricAuth {
        let r = |k: &FabricKey| FabricKey {
            id: k.id,
            key: "redacted".into(),
        };
        FabricAuth {
            peers: self
                .peers
                .iter()
                .map(|p| PeerKeys {
                    host: p.host,
                    tx: r(&p.tx),
                    rx: p.rx.iter().map(r).collect(),
                })
                .collect(),
        }
    }
}

impl AgentConfig {
    /// This configuration without secrets (store passwords, fabric keys), for
    /// showing (`GET /v1/config`).
    pub fn redacted(&self) -> AgentConfig {
        AgentConfig {
            instances: self
                .instances
                .iter()
                .map(InstanceConfig::redacted)
                .collect(),
            fabric_auth: self.fabric_auth.as_ref().map(FabricAuth::redacted),
            ..self.clone()
        }
    }
}

/// Per-group selection policy (Stratos §4.2, "achieving flow distribution in
/// practice"): with `pinned`, the agent remembers each flow's first choice (both
/// directions) in a bounded flow table, so a changed split moves only new flows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupPolicy {
    /// Tenant VNI of the group.
    pub vni: u32,
    /// Group id (as in [`TenantFib::groups`]).
    pub group: u32,
    /// Pin flows to their first choice.
    #[serde(default)]
    pub pinned: bool,
    /// Targets that get no new flows (weight 0, absent from the ranges) but keep
    /// their pinned flows until these end or idle out.
    #[serde(default)]
    pub draining: Vec<Output>,
    /// The targets keep flow state inside themselves: moving a flow away breaks
    /// it, so a target is failed over only when its process is gone, never on a
    /// mere suspicion (missed heartbeats), which costs nothing only when state is
    /// in the store.
    #[serde(default)]
    pub local_state: bool,
    /// The middlebox is `state: cached`: its instances may hold ownership
    /// leases once the controller grants them (`lease_epoch`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub cached: bool,
    /// Nonzero: the controller has seen every agent run this group's current
    /// split, so the agent may grant its local instances ownership leases on
    /// their hash ranges ([`InstanceLease`], docs/STATE.md "Leases in the running
    /// system"). Changes whenever leases are granted anew; 0 revokes them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lease_epoch: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

fn is_false(v: &bool) -> bool {
    !*v
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

fn one() -> u16 {
    1
}

fn is_one(w: &u16) -> bool {
    *w == 1
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
        /// Its Seawall weight (the tenant spec's service `weight:`; default 1).
        #[serde(default = "one", skip_serializing_if = "is_one")]
        weight: u16,
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
    /// The other hosts allowed to send this tenant's VNI to this host through
    /// the fabric: those with a VM or an NF instance of the tenant. The agent
    /// drops the tenant's Geneve from any other peer (`peer_vni`), so a host
    /// cannot inject into a tenant that has nothing on it. Absent (a
    /// configuration from before the field): any registered peer may send it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub senders: Option<Vec<u32>>,
    /// The inner source addresses each sending host may put on this tenant's
    /// packets (Seawall §4's invariant: a host cannot hide its traffic behind
    /// another host's VM). A sender listed here may only send from its VMs'
    /// addresses; a sender not listed may send any (it runs the tenant's NF
    /// instances or its gateway, which forward others' packets). Absent: no
    /// check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sources: Option<Vec<PeerSources>>,
    /// The names of the tenant's chains by the ids its entries mark packets
    /// with, so that the agent's metrics can name them. Absent (a
    /// configuration from before the field): metrics show the ids.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chains: Vec<ChainName>,
}

/// A chain id of a tenant's FIB and the chain it stands for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainName {
    /// The id packets of this chain's direction are marked with.
    pub id: u16,
    /// The chain's name in the tenant's spec.
    pub name: String,
    /// True for the replies' direction of a bidirectional chain.
    pub reverse: bool,
}

/// The inner source addresses one host may send a tenant's packets from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerSources {
    /// The sending host.
    pub host: u32,
    /// Its VMs' addresses.
    pub addrs: Vec<std::net::IpAddr>,
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
    /// State backend: `local`, `redis://HOST:PORT` or `redis-cluster://HOST:PORT,...`;
    /// `redis://USER@HOST:PORT?prefix=P` when the store has a user per tenant.
    pub state: String,
    /// The password of the store user `state` names: handed to the instance
    /// process in its environment (never on its command line), and left out of
    /// the agent's `GET /v1/config` ([`InstanceConfig::redacted`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_password: Option<StorePassword>,
    /// The backends of its load balancer that are not up (down, draining,
    /// removed), as the controller's health checks and operators decide. A
    /// change here reaches the running instance without restarting it (the
    /// agent writes it to the instance's backends file, which the instance
    /// reads at its next timer tick): compare configurations with
    /// [`InstanceConfig::same_process`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backends: Vec<BackendOverride>,
}

/// A load-balancer backend that is not up ([`InstanceConfig::backends`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendOverride {
    /// `IP` (every backend at that address) or `IP:PORT` (`[v6]:PORT`).
    pub addr: String,
    /// What the load balancer may do with it.
    pub state: BackendHealthState,
}

/// A backend's state as the control plane carries it (`sluice_nf::BackendState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendHealthState {
    /// Takes new connections.
    Up,
    /// No new connections; existing ones keep it.
    Down,
    /// Drained: no new connections, existing ones continue until the
    /// deregistration delay passes.
    Draining,
    /// Drained past its deregistration delay: its connections' packets are
    /// dropped.
    Removed,
}

impl BackendHealthState {
    /// The state's name (`up`, `down`, `draining`, `removed`).
    pub fn as_str(self) -> &'static str {
        match self {
            BackendHealthState::Up => "up",
            BackendHealthState::Down => "down",
            BackendHealthState::Draining => "draining",
            BackendHealthState::Removed => "removed",
        }
    }
}

impl InstanceConfig {
    /// Whether `other` runs as the same process: equal but for
    /// [`InstanceConfig::backends`], which a running instance takes in
    /// without a restart.
    pub fn same_process(&self, other: &InstanceConfig) -> bool {
        let strip = |c: &InstanceConfig| InstanceConfig {
            backends: Vec::new(),
            ..c.clone()
        };
        strip(self) == strip(other)
    }

    /// This configuration without its store password, for showing.
    pub fn redacted(&self) -> InstanceConfig {
        InstanceConfig {
            state_password: self
                .state_password
                .as_ref()
                .map(|_| StorePassword::redacted()),
            ..self.clone()
        }
    }
}

/// The environment variable an agent passes an instance's store password in
/// (the one `sluice_state_redis` reads).
pub const STORE_PASSWORD_ENV: &str = "SLUICE_STORE_PASSWORD";

/// A state store password. Serialized as a plain string (it must reach the agent),
/// but its `Debug` never shows it, so logging a configuration does not leak it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StorePassword(String);

impl StorePassword {
    /// Wraps a password.
    pub fn new(s: impl Into<String>) -> StorePassword {
        StorePassword(s.into())
    }

    /// What a shown configuration carries instead of the password.
    pub fn redacted() -> StorePassword {
        StorePassword("<redacted>".into())
    }

    /// The password itself, for the environment of the instance process.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for StorePassword {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
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
    /// NF instances' health as the data plane sees it (heartbeats, load).
    #[serde(default)]
    pub health: Vec<InstanceHealth>,
    /// Local speculative failovers, oldest first (bounded history).
    #[serde(default)]
    pub failover_events: Vec<FailoverEvent>,
    /// Flows pinned to each target of pinned groups (what a drain waits for).
    #[serde(default)]
    pub pinned_flows: Vec<PinnedFlows>,
    /// What the agent measured of its chains.
    #[serde(default)]
    pub chains: Vec<ChainMeasure>,
    /// Whether Seawall rate-controls this host's senders.
    #[serde(default)]
    pub seawall: bool,
    /// Seawall's entities: one per (sending port, destination host), each at
    /// the rate of its path's (port, link) controllers.
    #[serde(default)]
    pub isolation: Vec<IsolationStatus>,
    /// Seawall feedback messages this host sent to other hosts' senders.
    #[serde(default)]
    pub seawall_feedback_sent: u64,
    /// Seawall feedback messages this host received from other hosts.
    #[serde(default)]
    pub seawall_feedback_received: u64,
    /// Hosts this agent found ignoring its feedback (their packets to it are
    /// dropped while accused; docs/ISOLATION.md, "Compromised hosts").
    #[serde(default)]
    pub accusations: Vec<Accusation>,
    /// What this host's health checks of load-balancer backends found
    /// ([`AgentConfig::health_checks`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backend_checks: Vec<BackendCheck>,
}

/// A host an agent found sending more than the Seawall feedback it got
/// allows: reported to the controller with every heartbeat while it lasts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Accusation {
    /// The accused host.
    pub host: u32,
    /// What it sent in the last period over its allowance, bits/s.
    pub rate_bps: u64,
    /// What the feedback allowed it then, bits/s.
    pub allowance_bps: u64,
    /// Congested periods in a row it had been told of by then.
    pub congested_periods: u32,
    /// Milliseconds since the accusation was made.
    pub age_ms: u64,
}

/// One Seawall rate controller: a port of the host (VM or NF instance) sending
/// to another host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IsolationStatus {
    /// Sending port.
    pub port: u16,
    /// Its VM or instance name.
    pub name: String,
    /// Destination host.
    pub dest_host: u32,
    /// The rate the port may send at to that host now, bits per second.
    pub rate_bps: u64,
    /// Packets let through.
    pub admitted_packets: u64,
    /// Bytes let through.
    pub admitted_bytes: u64,
    /// Packets dropped for being over the rate.
    pub policed_packets: u64,
    /// Bytes dropped for being over the rate.
    pub policed_bytes: u64,
    /// Packets the destination host reported as arrived.
    pub reported_received: u64,
    /// Packets the destination host reported as lost on the way.
    pub reported_lost: u64,
    /// Feedback reports applied.
    pub feedbacks: u64,
    /// Rate decreases (reports with loss).
    pub decreases: u64,
    /// Packets that waited in the port's queue for its rate.
    #[serde(default)]
    pub queued_packets: u64,
    /// Bytes waiting now.
    #[serde(default)]
    pub queue_bytes_now: u64,
    /// The port's weight (its service's `weight:`).
    #[serde(default)]
    pub weight: u16,
}

/// The shortest interval between an agent's heartbeats to the controller, and
/// the one it uses until the controller tells it one (the heartbeat answer's
/// `heartbeat_ms`): a fleet of up to 40 hosts keeps it.
pub const HEARTBEAT_MIN: std::time::Duration = std::time::Duration::from_millis(50);

/// The longest interval between an agent's heartbeats that it accepts being
/// told: a controller that is gone is noticed (and leases lapse) within a few
/// of these.
pub const HEARTBEAT_MAX: std::time::Duration = std::time::Duration::from_secs(10);

/// How long after the controller's last answer an agent heartbeating every
/// [`HEARTBEAT_MIN`] may still grant leases to its instances (ten beats);
/// longer intervals get longer grace ([`lease_grace`]).
pub const LEASE_CONTROLLER_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

/// The interval an agent heartbeats at when the controller's last answer told
/// it `told_ms` (`None`: an answer without the field, from a controller that
/// predates it and expects [`HEARTBEAT_MIN`]), kept within
/// [`HEARTBEAT_MIN`]..=[`HEARTBEAT_MAX`] whatever it says.
pub fn heartbeat_interval(told_ms: Option<u64>) -> std::time::Duration {
    told_ms.map_or(HEARTBEAT_MIN, |ms| {
        std::time::Duration::from_millis(ms).clamp(HEARTBEAT_MIN, HEARTBEAT_MAX)
    })
}

/// How long after the controller's last answer an agent heartbeating every
/// `interval` may still grant leases: [`LEASE_CONTROLLER_GRACE`] plus two
/// intervals beyond the shortest, so a lost or late heartbeat does not let
/// leases lapse while the controller answers. The controller waits at least
/// this long (plus a lease) for an agent that does not acknowledge a
/// revocation, with the longest interval it told any host.
pub fn lease_grace(interval: std::time::Duration) -> std::time::Duration {
    LEASE_CONTROLLER_GRACE + interval.saturating_sub(HEARTBEAT_MIN) * 2
}

/// The heartbeat an agent repeats to the controller (`POST /v1/hosts`): its
/// registration plus the health of its NF instances. On the wire it is the
/// registration's JSON object with an extra `instances` array, so a controller
/// may read it as a plain [`HostRegistration`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostHeartbeat {
    /// The registration.
    #[serde(flatten)]
    pub registration: HostRegistration,
    /// Health of the host's NF instances.
    #[serde(default)]
    pub instances: Vec<InstanceHealth>,
    /// What the agent measured of its chains (the scaler's metric when the
    /// application reports none).
    #[serde(default)]
    pub chains: Vec<ChainMeasure>,
    /// The hosts this agent accuses now (the whole list every time: one
    /// that is gone was withdrawn). Attributed to the heartbeat's host, which
    /// the controller checks against the caller's token.
    #[serde(default)]
    pub accusations: Vec<Accusation>,
    /// The results of this host's health checks of load-balancer backends
    /// ([`AgentConfig::health_checks`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backend_checks: Vec<BackendCheck>,
    /// What this host sent through the fabric to each peer host (cumulative
    /// since the agent started): the controller adds these up per rack into
    /// what each rack's uplink carried (measured utilisation).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<PeerTraffic>,
}

/// What one host sent through the fabric to one peer host (cumulative since
/// its agent started; the controller takes differences).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerTraffic {
    /// The peer's host id.
    pub host: u32,
    /// Datagrams sent to it.
    pub packets: u64,
    /// Their UDP payload bytes (the Geneve header and what it carries). On
    /// the wire each datagram adds its UDP, IPv4 and Ethernet headers
    /// ([`FABRIC_WIRE_OVERHEAD`]).
    pub bytes: u64,
}

/// Bytes a fabric datagram adds on an Ethernet link beyond its UDP payload:
/// Ethernet (14), IPv4 (20) and UDP (8) headers.
pub const FABRIC_WIRE_OVERHEAD: u64 = 42;

/// One NF instance's health, as its agent reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceHealth {
    /// `tenant/middlebox/k`.
    pub name: String,
    /// Port id.
    pub port: u16,
    /// The process runs (as far as the supervisor knows).
    pub alive: bool,
    /// Traffic is being steered away from it (no heartbeat for the suspicion
    /// timeout, or its process exited).
    pub suspected: bool,
    /// Milliseconds since its last heartbeat (None: never heard from).
    pub last_heartbeat_age_ms: Option<u64>,
    /// Datagrams it received.
    pub rx_packets: u64,
    /// Frames it sent back.
    pub tx_packets: u64,
    /// Frames it dropped (chain verdicts and its own drops).
    pub drops: u64,
    /// Frames it dropped because a socket queue was full.
    pub queue_drops: u64,
    /// CPU time it used (user + system), milliseconds.
    pub cpu_ms: u64,
    /// Epoch of the ownership lease it holds (0: none; only `state: cached`
    /// middleboxes hold leases).
    #[serde(default)]
    pub lease_epoch: u64,
    /// Reads of owned records its flow cache answered.
    #[serde(default)]
    pub cache_hits: u64,
    /// Its store round trips (from its last heartbeat). Only the agent's
    /// metrics show them: not sent to the controller, whose heartbeats they
    /// would multiply in size.
    #[serde(skip)]
    pub store_round_trips: LatencyHistogram,
    /// The latency it added to the packets it forwarded (likewise).
    #[serde(skip)]
    pub added_latency: LatencyHistogram,
    /// Its store batches that waited for a replica, that a replica
    /// acknowledged only on the second wait, and that none acknowledged
    /// ([`InstanceHeartbeat::replica_waits`] and the next two; likewise only
    /// in the agent's metrics).
    #[serde(skip)]
    pub replica: [u64; 3],
}

/// One local speculative failover: an instance suspected, its traffic moved to
/// the surviving instances of its groups, and (later) its rejoining.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailoverEvent {
    /// `tenant/middlebox/k`.
    pub instance: String,
    /// Port id.
    pub port: u16,
    /// Why: `heartbeat` (none for the suspicion timeout) or `exited`.
    pub reason: String,
    /// When the instance became suspect (the missed heartbeat's deadline, or the
    /// exit noticed), Unix time in microseconds.
    pub suspected_at_us: u64,
    /// When the data plane noticed (Unix microseconds).
    pub detected_at_us: u64,
    /// When the rewritten groups were in force (Unix microseconds).
    pub applied_at_us: u64,
    /// When its heartbeats resumed and the controller's groups were restored
    /// (Unix microseconds).
    pub rejoined_at_us: Option<u64>,
    /// How long its heartbeats had been silent when they resumed
    /// (microseconds; set at rejoining): what tells a late heartbeat from a
    /// dead instance when tuning the detector.
    #[serde(default)]
    pub silence_us: Option<u64>,
    /// Groups rewritten.
    pub groups: u32,
}

/// What an agent measured of one chain's traffic entering at its VMs
/// (cumulative since the agent started; the controller takes differences).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainMeasure {
    /// Tenant VNI.
    pub vni: u32,
    /// Chain id as compiled: `2 * i` for the tenant's `i`-th chain in its
    /// forward direction, `2 * i + 1` in reverse.
    pub chain: u16,
    /// Packets that entered the chain from a VM here.
    pub packets: u64,
    /// Their bytes (Ethernet frames).
    pub bytes: u64,
    /// TCP connections opened (SYNs entering, retransmissions included).
    pub syns: u64,
    /// Handshakes timed: the SYN-ACK reached the client.
    pub handshakes: u64,
    /// Sum of their times, SYN entering to SYN-ACK delivered, ns.
    pub handshake_ns: u64,
    /// SYNs whose SYN-ACK never came (forgotten after 10 s).
    pub unanswered: u64,
    /// What the chain added to the packets it delivered to a VM here: the
    /// time each spent in Sluice's hosts (agents, NF instances, shaping
    /// queues) from entering the chain to leaving its last middlebox, summed
    /// over the hosts it crossed without synchronised clocks
    /// (`sluice_switch::tunnel::ChainClock`; the fabric's wires excluded).
    #[serde(default)]
    pub latency: LatencyHistogram,
}

/// Pinned flows of one target of a pinned group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinnedFlows {
    /// Tenant VNI.
    pub vni: u32,
    /// Group id.
    pub group: u32,
    /// The target.
    pub target: Output,
    /// Live (not idled-out) flows pinned to it.
    pub flows: u64,
    /// The target is draining (gets no new flows).
    pub draining: bool,
}

/// Magic at the start of an instance heartbeat datagram. Its first byte has
/// Geneve version bits `01`, so no Geneve packet (version 0) starts with it.
pub const HEARTBEAT_MAGIC: [u8; 4] = *b"SLHB";

/// Length of an encoded [`InstanceHeartbeat`] without its histograms, as
/// instances before them sent it (still accepted: an agent adopts instances
/// an older binary started).
pub const HEARTBEAT_BASE_LEN: usize = 4 + 4 + 8 * 8;

/// Length of an encoded [`InstanceHeartbeat`] without its replica counters,
/// as instances before them sent it (still accepted).
pub const HEARTBEAT_HIST_LEN: usize = HEARTBEAT_BASE_LEN + 2 * LatencyHistogram::ENCODED_LEN;

/// Length of an encoded [`InstanceHeartbeat`].
pub const HEARTBEAT_LEN: usize = HEARTBEAT_HIST_LEN + 3 * 8;

/// Upper bounds of the buckets of a [`LatencyHistogram`], nanoseconds: from
/// 10 µs (an in-process store, an idle instance's batch) to a second (a
/// store failing over). Fixed, so that every instance's histograms add up.
pub const LATENCY_BOUNDS_NS: [u64; 15] = [
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    1_000_000_000,
];

/// [`LATENCY_BOUNDS_NS`] in seconds, the unit the metrics export.
pub const LATENCY_BOUNDS_SECONDS: [f64; 15] = {
    let mut s = [0.0; 15];
    let mut i = 0;
    while i < s.len() {
        s[i] = LATENCY_BOUNDS_NS[i] as f64 / 1e9;
        i += 1;
    }
    s
};

/// Buckets of a [`LatencyHistogram`]: one per bound, and `+Inf`.
pub const LATENCY_BUCKETS: usize = LATENCY_BOUNDS_NS.len() + 1;

/// A latency histogram over [`LATENCY_BOUNDS_NS`] that an instance keeps
/// and sends in every heartbeat. Its counts are totals since the process
/// started (not per heartbeat), so a lost heartbeat loses nothing: the next
/// one carries everything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencyHistogram {
    /// Observations per bucket (not cumulative; the last is `+Inf`).
    pub counts: [u64; LATENCY_BUCKETS],
    /// Sum of the observations, nanoseconds.
    pub sum_ns: u64,
}

impl LatencyHistogram {
    /// Length of its encoding: the counts, then the sum.
    pub const ENCODED_LEN: usize = 8 * (LATENCY_BUCKETS + 1);

    /// Records `n` observations of `ns` nanoseconds each (one measurement
    /// standing for `n` packets, or `n` = 1). Counters wrap rather than
    /// panic; at a billion observations a second that takes centuries.
    pub fn observe(&mut self, ns: u64, n: u64) {
        let i = LATENCY_BOUNDS_NS
            .iter()
            .position(|b| ns <= *b)
            .unwrap_or(LATENCY_BOUNDS_NS.len());
        self.counts[i] = self.counts[i].wrapping_add(n);
        self.sum_ns = self.sum_ns.wrapping_add(ns.wrapping_mul(n));
    }

    /// Adds `o`'s observations to these (wrapping, as [`Self::observe`]).
    pub fn add(&mut self, o: &LatencyHistogram) {
        for (a, c) in self.counts.iter_mut().zip(&o.counts) {
            *a = a.wrapping_add(*c);
        }
        self.sum_ns = self.sum_ns.wrapping_add(o.sum_ns);
    }

    /// Observations recorded.
    pub fn count(&self) -> u64 {
        self.counts.iter().fold(0u64, |a, c| a.wrapping_add(*c))
    }

    fn encode_into(&self, b: &mut [u8]) {
        for (i, v) in self.counts.iter().chain([&self.sum_ns]).enumerate() {
            b[8 * i..8 * i + 8].copy_from_slice(&v.to_be_bytes());
        }
    }

    fn decode(b: &[u8]) -> LatencyHistogram {
        let u = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[8 * i..8 * i + 8]);
            u64::from_be_bytes(a)
        };
        let mut h = LatencyHistogram::default();
        for (i, c) in h.counts.iter_mut().enumerate() {
            *c = u(i);
        }
        h.sum_ns = u(LATENCY_BUCKETS);
        h
    }
}

/// The small datagram an NF instance sends its agent every 10 ms, from its data
/// socket to the agent's Geneve address (the agent tells it from Geneve by
/// [`HEARTBEAT_MAGIC`]): liveness and load counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InstanceHeartbeat {
    /// Increases by one per heartbeat (restarts from 0 with the process).
    pub seq: u32,
    /// Datagrams received.
    pub rx_packets: u64,
    /// Frames sent back.
    pub tx_packets: u64,
    /// Frames dropped.
    pub drops: u64,
    /// Frames dropped because a queue was full.
    pub queue_drops: u64,
    /// CPU time (user + system), microseconds.
    pub cpu_us: u64,
    /// Process id.
    pub pid: u64,
    /// Epoch of the ownership lease held (0: none).
    pub lease_epoch: u64,
    /// Reads of owned records its flow cache answered, over every lease held.
    pub cache_hits: u64,
    /// How long its calls to the state store took that waited for replies
    /// (one observation per round trip).
    pub store_round_trips: LatencyHistogram,
    /// How long its forwarded packets spent in it, from the receipt of their
    /// batch to the batch's transmission (measured once per batch, one
    /// observation per packet sent).
    pub added_latency: LatencyHistogram,
    /// Batches whose writes waited for a store replica
    /// (`sluice_state::StoreCounters::replica_waits`; 0 without replicas).
    pub replica_waits: u64,
    /// Of those, batches a replica acknowledged only on the second, longer
    /// wait (a lagging replica).
    pub replica_rewaits: u64,
    /// Of those, batches no replica acknowledged in either wait: writes a
    /// store primary's death could lose.
    pub replica_shortfalls: u64,
}

impl InstanceHeartbeat {
    /// The datagram (big-endian fields after the magic).
    pub fn encode(&self) -> [u8; HEARTBEAT_LEN] {
        let mut b = [0u8; HEARTBEAT_LEN];
        b[..4].copy_from_slice(&HEARTBEAT_MAGIC);
        b[4..8].copy_from_slice(&self.seq.to_be_bytes());
        let fields = [
            self.rx_packets,
            self.tx_packets,
            self.drops,
            self.queue_drops,
            self.cpu_us,
            self.pid,
            self.lease_epoch,
            self.cache_hits,
        ];
        for (i, f) in fields.iter().enumerate() {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(&f.to_be_bytes());
        }
        let h = HEARTBEAT_BASE_LEN;
        self.store_round_trips
            .encode_into(&mut b[h..h + LatencyHistogram::ENCODED_LEN]);
        self.added_latency
            .encode_into(&mut b[h + LatencyHistogram::ENCODED_LEN..HEARTBEAT_HIST_LEN]);
        let replica = [
            self.replica_waits,
            self.replica_rewaits,
            self.replica_shortfalls,
        ];
        for (i, f) in replica.iter().enumerate() {
            let at = HEARTBEAT_HIST_LEN + 8 * i;
            b[at..at + 8].copy_from_slice(&f.to_be_bytes());
        }
        b
    }

    /// True if `d` starts like a heartbeat (whether or not it is complete).
    pub fn is_heartbeat(d: &[u8]) -> bool {
        d.len() >= 4 && d[..4] == HEARTBEAT_MAGIC
    }

    /// Parses a heartbeat (None: not one, or truncated). One of
    /// [`HEARTBEAT_BASE_LEN`] bytes, from an instance older than the
    /// histograms, has them empty; one of [`HEARTBEAT_HIST_LEN`] bytes,
    /// older than the replica counters, has those 0.
    pub fn decode(d: &[u8]) -> Option<InstanceHeartbeat> {
        let full = d.len() >= HEARTBEAT_LEN;
        let hists = full || d.len() == HEARTBEAT_HIST_LEN;
        if (!hists && d.len() != HEARTBEAT_BASE_LEN) || !Self::is_heartbeat(d) {
            return None;
        }
        let hist = |k: usize| {
            let at = HEARTBEAT_BASE_LEN + k * LatencyHistogram::ENCODED_LEN;
            if hists {
                LatencyHistogram::decode(&d[at..at + LatencyHistogram::ENCODED_LEN])
            } else {
                LatencyHistogram::default()
            }
        };
        let u = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&d[8 + 8 * i..16 + 8 * i]);
            u64::from_be_bytes(a)
        };
        let replica = |k: usize| {
            let at = HEARTBEAT_HIST_LEN + 8 * k;
            match d.get(at..at + 8) {
                Some(b) if full => u64::from_be_bytes(b.try_into().expect("8 bytes")),
                _ => 0,
            }
        };
        Some(InstanceHeartbeat {
            seq: u32::from_be_bytes([d[4], d[5], d[6], d[7]]),
            rx_packets: u(0),
            tx_packets: u(1),
            drops: u(2),
            queue_drops: u(3),
            cpu_us: u(4),
            pid: u(5),
            lease_epoch: u(6),
            cache_hits: u(7),
            store_round_trips: hist(0),
            added_latency: hist(1),
            replica_waits: replica(0),
            replica_rewaits: replica(1),
            replica_shortfalls: replica(2),
        })
    }
}

/// Magic at the start of a lease datagram (agent to instance). Like
/// [`HEARTBEAT_MAGIC`], its first byte has Geneve version bits `01`.
pub const LEASE_MAGIC: [u8; 4] = *b"SLLS";

/// Most ranges one lease datagram carries.
pub const LEASE_MAX_RANGES: usize = 64;

/// An ownership lease (or its revocation) the agent sends an NF instance in
/// answer to a heartbeat: while valid, every packet of the `ranges` of the
/// direction-invariant flow hash goes to this instance, so it may cache their
/// per-flow records (docs/STATE.md).
///
/// The lease runs `valid_us` from the moment the instance *sent* heartbeat
/// `hb_seq`, on the instance's own clock, not from the moment this datagram
/// arrives: a paused instance that finds an old answer in its socket queue must
/// not take it for a fresh one. Since the agent saw that heartbeat after it was
/// sent, a lease always ends before the agent's suspicion of a silent instance
/// can start (the agent keeps `valid_us` below its suspicion delay).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InstanceLease {
    /// Changes whenever the split changes; 0 revokes any lease.
    pub epoch: u64,
    /// The heartbeat this answers.
    pub hb_seq: u32,
    /// Validity from that heartbeat's sending, microseconds.
    pub valid_us: u32,
    /// Inclusive ranges of `FlowKey::symmetric_hash`, at most
    /// [`LEASE_MAX_RANGES`].
    pub ranges: Vec<(u32, u32)>,
}

impl InstanceLease {
    /// The datagram: magic, epoch, hb_seq, valid_us, range count (u16), then
    /// each range's bounds, big-endian.
    pub fn encode(&self) -> Vec<u8> {
        let n = self.ranges.len().min(LEASE_MAX_RANGES);
        let mut b = Vec::with_capacity(22 + 8 * n);
        b.extend_from_slice(&LEASE_MAGIC);
        b.extend_from_slice(&self.epoch.to_be_bytes());
        b.extend_from_slice(&self.hb_seq.to_be_bytes());
        b.extend_from_slice(&self.valid_us.to_be_bytes());
        b.extend_from_slice(&(n as u16).to_be_bytes());
        for &(lo, hi) in &self.ranges[..n] {
            b.extend_from_slice(&lo.to_be_bytes());
            b.extend_from_slice(&hi.to_be_bytes());
        }
        b
    }

    /// True if `d` starts like a lease datagram.
    pub fn is_lease(d: &[u8]) -> bool {
        d.len() >= 4 && d[..4] == LEASE_MAGIC
    }

    /// Parses a lease datagram. `None`: not one, truncated, too many ranges, or
    /// a range with `lo > hi`.
    pub fn decode(d: &[u8]) -> Option<InstanceLease> {
        if !Self::is_lease(d) || d.len() < 22 {
            return None;
        }
        let u32_at = |i: usize| u32::from_be_bytes([d[i], d[i + 1], d[i + 2], d[i + 3]]);
        let epoch = u64::from_be_bytes(d[4..12].try_into().ok()?);
        let n = u16::from_be_bytes([d[20], d[21]]) as usize;
        if n > LEASE_MAX_RANGES || d.len() != 22 + 8 * n {
            return None;
        }
        let ranges: Vec<(u32, u32)> = (0..n)
            .map(|i| (u32_at(22 + 8 * i), u32_at(26 + 8 * i)))
            .collect();
        if ranges.iter().any(|r| r.0 > r.1) {
            return None;
        }
        Some(InstanceLease {
            epoch,
            hb_seq: u32_at(12),
            valid_us: u32_at(16),
            ranges,
        })
    }
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

    /// Backend states change without a restart: the agent compares
    /// configurations with `same_process`, which ignores them alone.
    #[test]
    fn backend_states_do_not_make_another_process() {
        let a = InstanceConfig {
            name: "t/lb/0".into(),
            tenant: "t".into(),
            middlebox: "lb".into(),
            port: 100,
            vni: 5,
            chain_yaml: "chain".into(),
            state: "local".into(),
            state_password: None,
            backends: Vec::new(),
        };
        let down = InstanceConfig {
            backends: vec![BackendOverride {
                addr: "10.0.0.2:80".into(),
                state: BackendHealthState::Down,
            }],
            ..a.clone()
        };
        assert!(a.same_process(&down) && down.same_process(&a));
        let other = InstanceConfig {
            chain_yaml: "other".into(),
            ..down.clone()
        };
        assert!(!other.same_process(&down));
        let json = serde_json::to_string(&down).unwrap();
        assert!(
            json.contains(r#""backends":[{"addr":"10.0.0.2:80","state":"down"}]"#),
            "{json}"
        );
        // An agent without the field reads the rest, and an empty list is
        // not sent at all (older agents see what they always saw).
        assert!(!serde_json::to_string(&a).unwrap().contains("backends"));
    }

    #[test]
    fn store_passwords_travel_but_never_show() {
        let i = InstanceConfig {
            name: "t/fw/0".into(),
            tenant: "t".into(),
            middlebox: "fw".into(),
            port: 100,
            vni: 5,
            chain_yaml: String::new(),
            state: "redis://sluice-t-t@h:1?prefix=t.t.".into(),
            state_password: Some(StorePassword::new("s3cret-pw")),
            backends: Vec::new(),
        };
        let cfg = AgentConfig {
            instances: vec![i.clone()],
            ..AgentConfig::default()
        };
        // The agent must receive it...
        let json = serde_json::to_string(&cfg).unwrap();
        assert!(json.contains("\"state_password\":\"s3cret-pw\""), "{json}");
        let back: AgentConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(back, cfg);
        // ...but no Debug or shown form carries it.
        assert!(!format!("{cfg:?}").contains("s3cret"));
        let shown = serde_json::to_string(&cfg.redacted()).unwrap();
        assert!(
            !shown.contains("s3cret") && shown.contains("<redacted>"),
            "{shown}"
        );
        assert_eq!(cfg.redacted().instances[0].state, i.state);
        // A configuration from before the field has no password.
        let old = json.replace(",\"state_password\":\"s3cret-pw\"", "");
        let old: AgentConfig = serde_json::from_str(&old).unwrap();
        assert_eq!(old.instances[0].state_password, None);
        assert!(!serde_json::to_string(&old)
            .unwrap()
            .contains("state_password"));
    }

    #[test]
    fn leases_round_trip_and_bad_ones_are_refused() {
        let l = InstanceLease {
            epoch: 7,
            hb_seq: 42,
            valid_us: 20_000,
            ranges: vec![(0, 99), (1000, u32::MAX)],
        };
        let d = l.encode();
        assert!(InstanceLease::is_lease(&d));
        assert!(!InstanceHeartbeat::is_heartbeat(&d));
        assert_eq!(InstanceLease::decode(&d), Some(l.clone()));
        // Truncated, trailing bytes, inverted range, a heartbeat.
        assert_eq!(InstanceLease::decode(&d[..d.len() - 1]), None);
        let mut long = d.clone();
        long.push(0);
        assert_eq!(InstanceLease::decode(&long), None);
        let bad = InstanceLease {
            ranges: vec![(5, 4)],
            ..l.clone()
        };
        assert_eq!(InstanceLease::decode(&bad.encode()), None);
        assert_eq!(
            InstanceLease::decode(&InstanceHeartbeat::default().encode()),
            None
        );
        // A revocation carries no ranges.
        let revoke = InstanceLease::default().encode();
        assert_eq!(
            InstanceLease::decode(&revoke),
            Some(InstanceLease::default())
        );
        // Neither starts like a Geneve packet (version 0).
        assert_ne!(d[0] >> 6, 0);
    }

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
            pardons: vec![Pardon {
                host: 2,
                generation: 1,
            }],
            health_checks: vec![HealthCheck {
                tenant: "acme".into(),
                middlebox: "lb-a".into(),
                backend: "10.10.1.11".into(),
                port: 1,
                addr: Ipv4Addr::new(10, 10, 1, 11),
                tcp_port: 80,
                http_path: Some("/healthz".into()),
                interval_ms: 2000,
                timeout_ms: 1000,
            }],
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
                        weight: 1,
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
            group_policies: vec![GroupPolicy {
                vni: 7,
                group: 1,
                pinned: true,
                draining: vec![Output::Port(sluice_switch::PortId(2))],
                local_state: true,
                cached: false,
                lease_epoch: 3,
            }],
            fabric_auth: Some(FabricAuth {
                peers: vec![PeerKeys {
                    host: 2,
                    tx: FabricKey {
                        id: 1,
                        key: "ab".repeat(32),
                    },
                    rx: vec![FabricKey {
                        id: 1,
                        key: "cd".repeat(32),
                    }],
                }],
            }),
        };
        // Redaction keeps who and which ids, never a key.
        let red = serde_json::to_string(&c.fabric_auth.as_ref().unwrap().redacted()).unwrap();
        assert!(
            !red.contains("abab") && !red.contains("cdcd") && red.contains("\"id\":1"),
            "{red}"
        );
        // So does the whole configuration as the agent's API shows it.
        let shown = serde_json::to_string(&c.redacted()).unwrap();
        assert!(
            !shown.contains("abab") && !shown.contains("cdcd"),
            "{shown}"
        );
        let j = serde_json::to_string(&c).unwrap();
        assert!(j.contains("\"type\":\"vm\""), "{j}");
        let back: AgentConfig = serde_json::from_str(&j).unwrap();
        assert_eq!(back, c);
        // Older senders omit the policies.
        let old = j.replace(
            &format!(
                ",\"group_policies\":{}",
                serde_json::to_string(&c.group_policies).unwrap()
            ),
            "",
        );
        assert!(!old.contains("group_policies"), "{old}");
        let back: AgentConfig = serde_json::from_str(&old).unwrap();
        assert!(back.group_policies.is_empty());
        // A VM port's weight is written only when it is not 1, and read as 1
        // when absent.
        assert!(!j.contains("weight"), "{j}");
        let mut heavy = c.clone();
        if let PortKind::Vm { weight, .. } = &mut heavy.ports[0].kind {
            *weight = 5;
        }
        let hj = serde_json::to_string(&heavy).unwrap();
        assert!(hj.contains("\"weight\":5"), "{hj}");
        assert_eq!(serde_json::from_str::<AgentConfig>(&hj).unwrap(), heavy);
    }

    #[test]
    fn tenant_senders_are_optional_on_the_wire() {
        let t = TenantFib {
            tenant: "t".into(),
            vni: 7,
            entries: vec![],
            groups: vec![],
            senders: Some(vec![2, 3]),
            sources: None,
            chains: vec![ChainName {
                id: 1,
                name: "web".into(),
                reverse: true,
            }],
        };
        let j = serde_json::to_string(&t).unwrap();
        assert!(j.contains("\"senders\":[2,3]"), "{j}");
        assert_eq!(serde_json::from_str::<TenantFib>(&j).unwrap(), t);
        // A configuration from before the field reads as "any peer".
        let old = r#"{"tenant":"t","vni":7,"entries":[],"groups":[]}"#;
        let back: TenantFib = serde_json::from_str(old).unwrap();
        assert_eq!(back.senders, None);
        assert!(back.chains.is_empty(), "no names: the metrics show ids");
        assert!(!serde_json::to_string(&back).unwrap().contains("senders"));
    }

    #[test]
    fn heartbeats_round_trip_and_are_not_geneve() {
        let mut h = InstanceHeartbeat {
            seq: 7,
            rx_packets: 1,
            tx_packets: 2,
            drops: 3,
            queue_drops: 4,
            cpu_us: 5,
            pid: 6,
            lease_epoch: 8,
            cache_hits: 9,
            ..InstanceHeartbeat::default()
        };
        h.store_round_trips.observe(120_000, 1);
        h.added_latency.observe(3_000_000_000, 32);
        (h.replica_waits, h.replica_rewaits, h.replica_shortfalls) = (10, 11, 12);
        let b = h.encode();
        assert_eq!(InstanceHeartbeat::decode(&b), Some(h));
        assert_eq!(InstanceHeartbeat::decode(&b[..HEARTBEAT_LEN - 1]), None);
        // An older instance's heartbeat, without replica counters.
        let hist = InstanceHeartbeat::decode(&b[..HEARTBEAT_HIST_LEN]).unwrap();
        assert_eq!(hist.added_latency, h.added_latency);
        assert_eq!(
            (
                hist.replica_waits,
                hist.replica_rewaits,
                hist.replica_shortfalls
            ),
            (0, 0, 0)
        );
        // An older instance's heartbeat, without histograms.
        let old = InstanceHeartbeat::decode(&b[..HEARTBEAT_BASE_LEN]).unwrap();
        assert_eq!(old.cache_hits, 9);
        assert_eq!(old.store_round_trips, LatencyHistogram::default());
        assert_eq!(old.added_latency.count(), 0);
        assert_ne!(b[0] >> 6, 0, "Geneve version 0 never starts like this");
        assert!(!InstanceHeartbeat::is_heartbeat(&[0, 0, 0x65, 0x58]));
    }

    #[test]
    fn latency_buckets_take_bounds_inclusively_and_weights() {
        let mut h = LatencyHistogram::default();
        h.observe(0, 1);
        h.observe(10_000, 1); // on the first bound: still the first bucket
        h.observe(10_001, 2);
        h.observe(1_000_000_000, 1); // the last bound
        h.observe(1_000_000_001, 3); // beyond it: +Inf
        assert_eq!(h.counts[0], 2);
        assert_eq!(h.counts[1], 2);
        assert_eq!(h.counts[LATENCY_BUCKETS - 2], 1);
        assert_eq!(h.counts[LATENCY_BUCKETS - 1], 3);
        assert_eq!(h.count(), 8);
        assert_eq!(
            h.sum_ns,
            10_000 + 2 * 10_001 + 1_000_000_000 + 3 * 1_000_000_001
        );
        // Totals, not deltas: a later heartbeat carries what an earlier,
        // lost one did.
        let before = h;
        h.observe(30_000, 1);
        assert!(h.counts.iter().zip(before.counts).all(|(a, b)| *a >= b));
        assert_eq!(LATENCY_BOUNDS_SECONDS[0], 0.00001);
        assert_eq!(LATENCY_BOUNDS_SECONDS[14], 1.0);
        assert!(LATENCY_BOUNDS_NS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn a_told_heartbeat_interval_is_kept_in_bounds() {
        use std::time::Duration;
        assert_eq!(heartbeat_interval(None), HEARTBEAT_MIN, "not told: 50 ms");
        assert_eq!(heartbeat_interval(Some(6250)), Duration::from_millis(6250));
        assert_eq!(heartbeat_interval(Some(0)), HEARTBEAT_MIN);
        assert_eq!(heartbeat_interval(Some(u64::MAX)), HEARTBEAT_MAX);
    }

    #[test]
    fn lease_grace_is_unchanged_at_the_shortest_interval_and_spans_two_longer_ones() {
        use std::time::Duration;
        assert_eq!(lease_grace(HEARTBEAT_MIN), LEASE_CONTROLLER_GRACE);
        let i = Duration::from_millis(6250);
        let g = lease_grace(i);
        assert!(g > 2 * i && g < 3 * i, "{g:?}");
    }

    #[test]
    fn host_heartbeat_reads_as_a_registration() {
        let reg = HostRegistration {
            host: 2,
            name: "h2".into(),
            underlay: Ipv4Addr::new(10, 255, 0, 2),
            api: "http://127.0.0.1:1".into(),
            config_version: 4,
            api_token: None,
            capacity: Some(HostCapacity {
                instance_slots: Some(64),
                ..HostCapacity::default()
            }),
            api_csr: None,
        };
        let hb = HostHeartbeat {
            registration: reg.clone(),
            instances: vec![InstanceHealth {
                name: "t/fw/0".into(),
                port: 5,
                alive: true,
                ..InstanceHealth::default()
            }],
            chains: Vec::new(),
            accusations: Vec::new(),
            backend_checks: vec![BackendCheck {
                tenant: "t".into(),
                middlebox: "lb".into(),
                backend: "10.0.0.1:80".into(),
                target: "10.0.0.1:80".into(),
                ok: 3,
                failed: 1,
                last: Some(CheckOutcome::Refused),
            }],
            peers: Vec::new(),
        };
        let j = serde_json::to_string(&hb).unwrap();
        assert!(j.contains(r#""last":"refused""#), "{j}");
        let as_reg: HostRegistration = serde_json::from_str(&j).unwrap();
        assert_eq!(as_reg, reg);
        let back: HostHeartbeat = serde_json::from_str(&j).unwrap();
        assert_eq!(back, hb);
        let plain: HostHeartbeat =
            serde_json::from_str(&serde_json::to_string(&reg).unwrap()).unwrap();
        assert!(plain.instances.is_empty());
        // An agent from before `capacity` registers without it: no limit.
        let old = j.replace(r#","capacity":{"instance_slots":64}"#, "");
        assert_ne!(old, j, "the capacity was on the wire");
        let as_old: HostRegistration = serde_json::from_str(&old).unwrap();
        assert_eq!(as_old.capacity, None);
        // A capacity without `rack` (agents from before it): no locality.
        let c: HostCapacity = serde_json::from_str(r#"{"instance_slots":64}"#).unwrap();
        assert_eq!(c.rack, None);
        let racked = HostCapacity {
            rack: Some("r1".into()),
            ..c
        };
        let j = serde_json::to_string(&racked).unwrap();
        assert_eq!(j, r#"{"instance_slots":64,"rack":"r1"}"#);
        assert_eq!(serde_json::from_str::<HostCapacity>(&j).unwrap(), racked);
    }
}
