//! The data plane's counters: per port, the fabric's, and drops by reason.

use std::collections::BTreeMap;

use serde::Serialize;
use sluice_proto::Counters;

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
    /// A fabric peer sent a tenant's packet although the tenant has nothing
    /// on that peer (not in the tenant's `senders`): a misconfigured or
    /// compromised host injecting into another tenant's network.
    PeerVni,
    /// Sealing is on and a peer's datagram did not authenticate: a wrong tag
    /// (forged, altered or truncated), or no authentication option at all.
    AuthFailed,
    /// A sealed datagram under a key id this host does not hold for its
    /// sender (or sealed while sealing is off here); also a datagram this
    /// host could not seal for want of the peer's key.
    UnknownKey,
    /// A sealed datagram whose counter was seen already or is older than the
    /// replay window.
    Replayed,
    /// The recipient's owner blocked its source (`POST
    /// /v1/tenants/{name}/blocks`): dropped at the sending host, or at the
    /// receiving host when the sender did not enforce the block.
    Blocked,
    /// A peer this host accuses of ignoring its Seawall feedback: its packets
    /// to this host are dropped until it is forgiven or cleared (Seawall §4's
    /// incremental sandbox).
    AccusedPeer,
    /// A peer sent a tenant's packet from an inner source address that is
    /// none of its VMs' (for a tenant it runs no NF instance or gateway of):
    /// a host hiding behind another's identity.
    SpoofedSource,
}

impl DropReason {
    /// Every reason, for reports that list zeros too.
    pub const ALL: [DropReason; 16] = [
        DropReason::NoMatch,
        DropReason::FibDrop,
        DropReason::Malformed,
        DropReason::UnknownSource,
        DropReason::SendFail,
        DropReason::UnknownOutput,
        DropReason::WrongVni,
        DropReason::NoLiveInstance,
        DropReason::RateLimited,
        DropReason::PeerVni,
        DropReason::AuthFailed,
        DropReason::UnknownKey,
        DropReason::Replayed,
        DropReason::Blocked,
        DropReason::AccusedPeer,
        DropReason::SpoofedSource,
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
            DropReason::PeerVni => "peer_vni",
            DropReason::AuthFailed => "auth_failed",
            DropReason::UnknownKey => "unknown_key",
            DropReason::Replayed => "replayed",
            DropReason::Blocked => "blocked",
            DropReason::AccusedPeer => "accused_peer",
            DropReason::SpoofedSource => "spoofed_source",
        }
    }

    pub(super) fn index(self) -> usize {
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
    /// The fabric, toward one peer host: counted as [`CounterId::Fabric`]
    /// and, for what leaves, in [`Stats::peers`] too.
    Peer(u32),
}

/// What left toward one peer host through the fabric (datagrams and their
/// UDP payload bytes, Geneve header included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerCounters {
    /// Datagrams sent.
    pub tx_packets: u64,
    /// Their UDP payload bytes.
    pub tx_bytes: u64,
}

/// Counters kept by the core (plain integers: only the data-plane thread writes
/// them; the I/O loop publishes copies).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Per port.
    pub ports: BTreeMap<u16, Counters>,
    /// Fabric.
    pub fabric: Counters,
    /// What left through the fabric toward each peer host, by host id: the
    /// controller adds these up per rack to measure what the uplinks carry
    /// (`sluice_proto::PeerTraffic`). An entry appears with the first
    /// datagram to its peer, so the map grows with peers, not packets.
    pub peers: BTreeMap<u32, PeerCounters>,
    /// Drops by reason, over every port.
    pub drops: [u64; DropReason::ALL.len()],
    /// ARP requests answered.
    pub arp_replies: u64,
    /// Heartbeats received from NF instances.
    pub heartbeats: u64,
    /// Local speculative failovers (instances suspected).
    pub failovers: u64,
    /// Health checks made while the receive queue still held datagrams after
    /// a bounded read (suspicion then waits for the ceiling).
    pub health_backlogs: u64,
    /// Reads of the receive queue before acting on a silence (an instance
    /// past its deadline): how often suspicion had to be confirmed.
    pub health_confirms: u64,
    /// Confirmations after which nobody was suspected: silences that were
    /// the agent's backlog, not the instances' (failovers avoided).
    pub health_cleared: u64,
    /// Health checks that found this agent had not run for longer than
    /// 50 ms (the instances' silence over it forgiven).
    pub agent_stalls: u64,
    /// Ownership leases sent to local instances (grants and renewals).
    pub leases: u64,
    /// Lease revocations sent to local instances.
    pub lease_revocations: u64,
    /// Seawall feedback messages sent to other hosts.
    pub seawall_feedback_sent: u64,
    /// Seawall feedback messages received and applied.
    pub seawall_feedback_received: u64,
    /// Hosts this host accused of ignoring its feedback (each accusation once).
    pub seawall_accused: u64,
}

impl Stats {
    pub(super) fn counters(&mut self, c: CounterId) -> &mut Counters {
        match c {
            CounterId::Port(p) => self.ports.entry(p).or_default(),
            CounterId::Fabric | CounterId::Peer(_) => &mut self.fabric,
        }
    }

    pub(super) fn drop(&mut self, c: CounterId, reason: DropReason) {
        self.counters(c).drops += 1;
        self.drops[reason.index()] += 1;
    }

    /// Adds `other`'s counters to these: what a reader of several forwarding
    /// threads' data planes ([`super::Sharding`]) reports is their sum.
    pub fn add(&mut self, other: &Stats) {
        fn sum(a: &mut Counters, b: &Counters) {
            a.rx_packets += b.rx_packets;
            a.rx_bytes += b.rx_bytes;
            a.tx_packets += b.tx_packets;
            a.tx_bytes += b.tx_bytes;
            a.drops += b.drops;
        }
        for (id, c) in &other.ports {
            sum(self.ports.entry(*id).or_default(), c);
        }
        sum(&mut self.fabric, &other.fabric);
        for (h, c) in &other.peers {
            let p = self.peers.entry(*h).or_default();
            p.tx_packets += c.tx_packets;
            p.tx_bytes += c.tx_bytes;
        }
        for (a, b) in self.drops.iter_mut().zip(other.drops) {
            *a += b;
        }
        // Spelled out, so a counter added to `Stats` without being summed
        // here does not compile.
        let Stats {
            ports: _,
            fabric: _,
            peers: _,
            drops: _,
            arp_replies,
            heartbeats,
            failovers,
            health_backlogs,
            health_confirms,
            health_cleared,
            agent_stalls,
            leases,
            lease_revocations,
            seawall_feedback_sent,
            seawall_feedback_received,
            seawall_accused,
        } = other;
        self.arp_replies += arp_replies;
        self.heartbeats += heartbeats;
        self.failovers += failovers;
        self.health_backlogs += health_backlogs;
        self.health_confirms += health_confirms;
        self.health_cleared += health_cleared;
        self.agent_stalls += agent_stalls;
        self.leases += leases;
        self.lease_revocations += lease_revocations;
        self.seawall_feedback_sent += seawall_feedback_sent;
        self.seawall_feedback_received += seawall_feedback_received;
        self.seawall_accused += seawall_accused;
    }

    /// Drops of one reason.
    pub fn drops_of(&self, reason: DropReason) -> u64 {
        self.drops[reason.index()]
    }

    /// Takes over `old`'s totals, and its counters of every port `same_port`
    /// says is still the same port, so a new configuration does not reset what
    /// monitoring has seen.
    pub(super) fn inherit(&mut self, old: &Stats, same_port: impl Fn(u16) -> bool) {
        for (id, c) in &old.ports {
            if same_port(*id) {
                self.ports.insert(*id, c.clone());
            }
        }
        self.fabric = old.fabric.clone();
        // Cumulative per peer even when a peer leaves the configuration:
        // the controller takes differences, and a counter that went down
        // would read as a restart.
        self.peers = old.peers.clone();
        self.drops = old.drops;
        self.arp_replies = old.arp_replies;
        self.heartbeats = old.heartbeats;
        self.failovers = old.failovers;
        self.health_backlogs = old.health_backlogs;
        self.health_confirms = old.health_confirms;
        self.health_cleared = old.health_cleared;
        self.agent_stalls = old.agent_stalls;
        self.leases = old.leases;
        self.lease_revocations = old.lease_revocations;
        self.seawall_feedback_sent = old.seawall_feedback_sent;
        self.seawall_feedback_received = old.seawall_feedback_received;
        self.seawall_accused = old.seawall_accused;
    }
}
