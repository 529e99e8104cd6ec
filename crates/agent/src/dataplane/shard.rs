//! The data plane on several forwarding threads: which thread (shard) a
//! received frame belongs to, and what each shard does besides forwarding.
//!
//! Every shard is a whole [`Dataplane`] built from the same configuration,
//! owned by one thread: nothing on the packet path is shared or locked. A
//! frame goes to the shard of its flow, `worker_of(symmetric_hash, n)` (the
//! rule an NF instance dispatches its workers by), so both directions of a
//! flow, entering from a VM port or from the fabric, and ICMP errors about it,
//! meet on one shard: the state kept per flow (pinned flows, the chain meter's
//! handshakes, the replayed previous lookup) never crosses threads. The
//! kernel's own spreading cannot do this alone: `PACKET_FANOUT_HASH` uses
//! `__skb_get_hash_symmetric`, symmetric but seeded at boot, so nothing on
//! the UDP side can agree with it, and `SO_REUSEPORT` hashes the outer
//! 4-tuple, which is one per peer or instance (every agent and instance sends
//! from one address and port). An I/O loop on several threads therefore
//! steers what it reads with [`Sharding`] and hands other shards' frames to
//! their threads (docs/ARCHITECTURE.md, "Forwarding on several cores").
//!
//! What is per host rather than per flow has one answer each:
//!
//! - **Instance health, leases, backend checks**: only the control shard
//!   ([`CONTROL_SHARD`]) runs them. Heartbeats and health-check answers are
//!   steered to it; the other shards never suspect anyone themselves and take
//!   the control shard's view when it changes ([`Dataplane::adopt_health`]),
//!   so every shard fails over the same instances.
//! - **Sealing**: each shard is a lane of the send counters (see
//!   `seal.rs`): nonces never repeat across threads, and receivers keep a
//!   replay window per lane. Sealed datagrams are steered by their counter,
//!   so every copy of one reaches the same window.
//! - **Counters and measurements**: each shard counts what it forwarded; a
//!   reader sums them ([`Stats::add`]).
//! - **Seawall** (rate control of this host's senders) keeps one budget per
//!   sender and one feedback state per peer: not split yet, so an agent with
//!   Seawall on forwards on one shard.

use sluice_proto::InstanceHeartbeat;
use sluice_switch::tunnel::parse_fabric_payload;
use sluice_wire::flow::worker_of;
use sluice_wire::parse::{parse_into, PacketMeta};

use super::health::Health;
use super::probes::to_probe_source;
use super::Dataplane;
#[cfg(doc)]
use super::Stats;

/// The shard that runs what is per host (instance health, leases, backend
/// checks) and receives what is not per flow (heartbeats, Seawall feedback,
/// frames that do not parse).
pub const CONTROL_SHARD: usize = 0;
/// Most forwarding threads (a sealed datagram says its sender's lane count
/// in one byte).
pub const MAX_SHARDS: usize = 64;

/// Which of the forwarding threads a data plane is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardRole {
    /// This shard, `0..count`.
    pub index: usize,
    /// How many there are.
    pub count: usize,
}

impl Default for ShardRole {
    fn default() -> ShardRole {
        ShardRole { index: 0, count: 1 }
    }
}

impl ShardRole {
    /// Whether this shard runs what is per host.
    pub fn control(&self) -> bool {
        self.index == CONTROL_SHARD
    }
}

/// A shard role out of range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("forwarding thread {index} of {count}: the count must be 1 to {MAX_SHARDS} and the index below it")]
pub struct ShardError {
    /// The index asked for.
    pub index: usize,
    /// The count asked for.
    pub count: usize,
}

/// Steers received frames to shards: the flow's shard, or the control shard
/// for what belongs to no flow. Keeps a parse buffer, so it allocates nothing
/// per frame.
#[derive(Debug, Default)]
pub struct Sharding {
    count: usize,
    meta: PacketMeta,
}

impl Sharding {
    /// Steering over `count` shards (clamped to `1..=MAX_SHARDS`).
    pub fn new(count: usize) -> Sharding {
        Sharding {
            count: count.clamp(1, MAX_SHARDS),
            meta: PacketMeta::default(),
        }
    }

    /// How many shards it steers to.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The shard of a frame received on a VM port: its flow's, or the control
    /// shard for answers to backend checks (they run there) and frames that do
    /// not parse (counted as dropped there).
    pub fn of_vm_frame(&mut self, f: &[u8]) -> usize {
        if self.count == 1 || to_probe_source(f) {
            return CONTROL_SHARD;
        }
        self.of_inner(f)
    }

    /// The shard of a datagram received on the Geneve socket: heartbeats and
    /// Seawall feedback go to the control shard; a sealed datagram to the
    /// shard of its counter (its inner frame cannot be read before it is
    /// opened, and the counter keeps every copy on one replay window); any
    /// other to the shard of its inner frame's flow.
    pub fn of_datagram(&mut self, d: &[u8]) -> usize {
        if self.count == 1
            || InstanceHeartbeat::is_heartbeat(d)
            || sluice_seawall::wire::is_feedback(d)
        {
            return CONTROL_SHARD;
        }
        let Ok(g) = parse_fabric_payload(d) else {
            return CONTROL_SHARD;
        };
        if let Some(a) = g.auth {
            return (a.counter % self.count as u64) as usize;
        }
        match d.get(g.inner_at..) {
            Some(inner) if !to_probe_source(inner) => self.of_inner(inner),
            _ => CONTROL_SHARD,
        }
    }

    fn of_inner(&mut self, f: &[u8]) -> usize {
        match parse_into(f, &mut self.meta) {
            Ok(()) => worker_of(self.meta.flow.symmetric_hash(), self.count),
            Err(_) => CONTROL_SHARD,
        }
    }
}

/// The control shard's view of instance health, for the other shards
/// ([`Dataplane::adopt_health`]).
#[derive(Debug, Clone)]
pub struct HealthView(Health);

impl Dataplane {
    /// Makes this data plane forwarding thread `index` of `count`: its lane
    /// of the sealing counters, and whether it runs what is per host.
    pub fn set_shard(&mut self, index: usize, count: usize) -> Result<(), ShardError> {
        if count == 0 || count > MAX_SHARDS || index >= count {
            return Err(ShardError { index, count });
        }
        self.shard = ShardRole { index, count };
        self.seal.set_lane(index, count);
        Ok(())
    }

    /// Which forwarding thread this is.
    pub fn shard(&self) -> ShardRole {
        self.shard
    }

    /// What this (the control) shard knows of instance health, to hand to
    /// the others.
    pub fn health_view(&self) -> HealthView {
        HealthView(self.health.clone())
    }

    /// Takes the control shard's view of instance health (a shard other than
    /// the control shard hears no heartbeats) and rewrites the groups by it,
    /// as the control shard did when it changed.
    pub fn adopt_health(&mut self, v: &HealthView) {
        self.health.inherit(&v.0);
        self.refresh_groups();
    }
}
