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
//!
//! One submodule per concern, each owning its part of the [`Dataplane`]:
//! `config` (building it from an [`AgentConfig`], the ports and peers),
//! `forward` (the per-batch packet path), `selection` (group selection and
//! pinned flows), `health` (instances' heartbeats, suspicion and failover),
//! `leases` (lease gating), `probes` (active health checks of backends), `seal` (authenticated encapsulation between
//! hosts), `seawall` (glue to Seawall's rate control and
//! feedback), `stats` (counters), `plan` (the messages to send) and `shard`
//! (the data plane on several forwarding threads: which thread a frame
//! belongs to, and what only one of them does).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use sluice_proto::{AgentConfig, ChainMeasure};

pub use crate::groups::{failover_group, Choice, GroupSel, PinKey, PinTable};
use crate::meter::ChainMeter;

#[cfg(test)]
mod block_tests;
mod config;
mod forward;
mod health;
mod leases;
mod plan;
mod probes;
mod seal;
mod seawall;
mod selection;
mod shard;
#[cfg(test)]
mod shard_tests;
mod stats;
#[cfg(test)]
mod tests;

pub use config::{parse_mac, valid_iface, ConfigError, Port, PortTarget, Source};
pub use health::{DEFAULT_SUSPECT_NS, MAX_SUSPECT_NS};
pub use leases::{LEASE_DRAIN_NS, LEASE_VALID_NS};
pub use plan::{Dest, Frames, Out, TxPlan};
pub use seal::{FabricSeal, ReplayWindow, SealError, REPLAY_WINDOW, SEAL_OVERHEAD, TAG_LEN};
pub use shard::{HealthView, ShardError, ShardRole, Sharding, CONTROL_SHARD, MAX_SHARDS};
pub use stats::{CounterId, DropReason, PeerCounters, Stats};

use config::Topology;
use forward::Lookup;
use health::Health;
use leases::Leases;
use probes::Probes;
use seawall::SeawallAdapter;
use selection::Selection;

/// The switch's router MAC: VMs send every frame to it, and delivered frames
/// come from it.
pub const ROUTER_MAC: [u8; 6] = [0x02, 0x53, 0x4c, 0x00, 0x00, 0x01];

/// The lookup structures of one configuration, plus counters.
#[derive(Debug)]
pub struct Dataplane {
    /// Host, version, ports, peers and sources of the configuration.
    topo: Topology,
    /// FIBs and the replayed previous lookup.
    lookup: Lookup,
    /// Groups as the agent selects from them, and pinned flows.
    groups: Selection,
    /// Instance ports' health and failover events.
    health: Health,
    /// When leases may be granted, and for how long.
    leases: Leases,
    /// Seawall's rate controllers and receiving side.
    seawall: SeawallAdapter,
    /// Keys, counters and replay windows of sealed fabric links.
    seal: FabricSeal,
    /// What the chains' applications see (handshake times, connection rates).
    meter: ChainMeter,
    /// Active health checks of load-balancer backends on this host's VMs.
    probes: Probes,
    stats: Stats,
    /// The data-plane clock (Unix ns, set by the I/O loop).
    now_ns: u64,
    /// Which forwarding thread this is (one of one unless set).
    shard: ShardRole,
}

impl Dataplane {
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
        let (ports, old_ports) = (&self.topo.ports, &old.topo.ports);
        self.stats.inherit(&old.stats, |id| {
            matches!((ports.get(&id), old_ports.get(&id)), (Some(p), Some(o)) if p.name == o.name)
        });
        // Health, suspicions and pinned flows carry over: a new split must not
        // forget which instances are down or move pinned flows.
        self.health.inherit(&old.health);
        self.groups.inherit(&old.groups);
        self.meter = old.meter.clone();
        self.now_ns = old.now_ns;
        self.leases = old.leases;
        self.seawall.inherit(&old.seawall);
        self.seawall.pardon(&self.topo.pardons, &old.topo.pardons);
        self.seal.inherit(&old.seal);
        // The same thread runs the new configuration: same lane, same duties.
        self.shard = old.shard;
        self.seal.set_lane(self.shard.index, self.shard.count);
        self.probes.inherit(&old.probes);
        self.seawall.apply_weights(&self.topo.ports);
        self.refresh_groups();
    }

    /// Sets the data-plane clock (Unix ns): heartbeats and pinned flows are
    /// stamped with it.
    pub fn set_now(&mut self, now_ns: u64) {
        self.now_ns = now_ns;
    }

    /// What the agent measured of each chain entering at its VMs (cumulative);
    /// also forgets handshakes that were never answered.
    pub fn chain_measures(&mut self) -> Vec<ChainMeasure> {
        self.meter.expire(self.now_ns);
        self.meter.report()
    }

    /// Runs the health checks of backends at the data-plane clock: fails
    /// those past their timeout, writes the SYNs of those due into `plan`.
    /// Returns whether a check ended (the report changed).
    pub fn probe_tick(&mut self, plan: &mut TxPlan) -> bool {
        // Backend checks are per host: the control shard runs them.
        if self.probes.is_empty() || !self.shard.control() {
            return false;
        }
        self.probes.tick(self.now_ns, plan)
    }

    /// What the health checks of backends found so far (cumulative).
    pub fn backend_checks(&self) -> Vec<sluice_proto::BackendCheck> {
        self.probes.report()
    }

    /// Frames addressed to the health checks' source that answered no check.
    pub fn unmatched_probe_answers(&self) -> u64 {
        self.probes.unmatched
    }

    /// Whether datagrams between hosts are sealed (authenticated and
    /// encrypted).
    pub fn sealing(&self) -> bool {
        self.seal.on()
    }

    /// Version of the configuration.
    pub fn version(&self) -> u64 {
        self.topo.version
    }

    /// Host id.
    pub fn host(&self) -> u32 {
        self.topo.host
    }

    /// The ports, by id.
    pub fn ports(&self) -> &BTreeMap<u16, Port> {
        &self.topo.ports
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Who sends from `addr`.
    pub fn source(&self, addr: Ipv4Addr) -> Option<Source> {
        self.topo.sources.get(&addr).map(|s| s.source)
    }

    /// Counts messages of a plan as sent (`sent` of them, in plan order) or failed
    /// (the rest): what the I/O loop calls after each send.
    pub fn account_sent(&mut self, outs: &[Out], sent: usize) {
        for (i, o) in outs.iter().enumerate() {
            if i < sent {
                let c = self.stats.counters(o.counter);
                c.tx_packets += 1;
                c.tx_bytes += o.len() as u64;
                if let CounterId::Peer(h) = o.counter {
                    let p = self.stats.peers.entry(h).or_default();
                    p.tx_packets += 1;
                    p.tx_bytes += o.len() as u64;
                }
            } else {
                self.stats.drop(o.counter, DropReason::SendFail);
            }
        }
    }
}
