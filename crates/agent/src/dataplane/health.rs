//! Instance health: heartbeats from the local NF instances, suspicion of the
//! silent ones and of those whose process exited, the failover events this
//! causes, and rejoining when heartbeats resume. A change of health rewrites
//! the groups in the same call ([`Dataplane::refresh_groups`]).

use std::collections::BTreeMap;

use sluice_proto::{FailoverEvent, InstanceHealth, InstanceHeartbeat};
use sluice_switch::{Output, PortId};

use super::config::{Port, PortTarget};
use super::leases::LeaseState;
use super::Dataplane;

/// Default time without a heartbeat after which an instance is suspected.
pub const DEFAULT_SUSPECT_NS: u64 = 30_000_000;
/// Failover events kept for status.
const MAX_EVENTS: usize = 256;

/// What the data plane knows of one NF instance.
#[derive(Debug, Clone, Default)]
pub(super) struct InstanceState {
    name: String,
    /// When its last heartbeat arrived (data-plane clock, ns).
    last_hb: Option<u64>,
    /// Its last heartbeat.
    hb: InstanceHeartbeat,
    pub(super) suspected: bool,
    /// Its process exited (the supervisor saw it), not merely silent.
    pub(super) exited: bool,
    /// The lease it holds or could hold.
    pub(super) lease: LeaseState,
}

impl InstanceState {
    /// Never heard from: it may still be starting.
    pub(super) fn starting(&self) -> bool {
        self.last_hb.is_none()
    }
}

/// The health of this host's NF instances.
#[derive(Debug)]
pub(super) struct Health {
    /// By instance port.
    pub(super) instances: BTreeMap<u16, InstanceState>,
    /// Failover events, oldest first (at most [`MAX_EVENTS`]).
    events: Vec<FailoverEvent>,
    /// Time without a heartbeat after which an instance is suspected.
    pub(super) suspect_ns: u64,
}

impl Health {
    /// Every instance port of `ports`, none heard from yet.
    pub(super) fn new(ports: &BTreeMap<u16, Port>) -> Health {
        let instances = ports
            .values()
            .filter(|p| matches!(p.target, PortTarget::Instance { .. }))
            .map(|p| {
                (
                    p.id,
                    InstanceState {
                        name: p.name.clone(),
                        ..InstanceState::default()
                    },
                )
            })
            .collect();
        Health {
            instances,
            events: Vec::new(),
            suspect_ns: DEFAULT_SUSPECT_NS,
        }
    }

    /// Takes over what `old` knew of the instances that are still here (same
    /// port and name): a new split must not forget which instances are down.
    pub(super) fn inherit(&mut self, old: &Health) {
        for (id, h) in &old.instances {
            if let Some(mine) = self.instances.get_mut(id) {
                if mine.name == h.name {
                    *mine = h.clone();
                }
            }
        }
        self.events.clone_from(&old.events);
        self.suspect_ns = old.suspect_ns;
    }

    /// The instance ports for which `f` holds.
    pub(super) fn ports_where(&self, f: fn(&InstanceState) -> bool) -> Vec<u16> {
        self.instances
            .iter()
            .filter(|(_, h)| f(h))
            .map(|(p, _)| *p)
            .collect()
    }

    /// The earliest time an instance not yet suspected will be if no heartbeat
    /// arrives.
    fn next_deadline(&self) -> Option<u64> {
        self.instances
            .values()
            .filter(|h| !h.suspected)
            .filter_map(|h| h.last_hb)
            .map(|t| t + self.suspect_ns)
            .min()
    }

    /// Logs failover events, keeping the newest [`MAX_EVENTS`].
    fn log(&mut self, events: impl IntoIterator<Item = FailoverEvent>) {
        self.events.extend(events);
        if self.events.len() > MAX_EVENTS {
            let extra = self.events.len() - MAX_EVENTS;
            self.events.drain(..extra);
        }
    }
}

impl Dataplane {
    /// Sets how long an instance may stay silent before it is suspected.
    pub fn set_suspect_after(&mut self, ns: u64) {
        self.health.suspect_ns = ns.max(1);
        // A lease must end before its holder can be suspected.
        self.leases.valid_ns = super::LEASE_VALID_NS.min(self.health.suspect_ns * 2 / 3);
    }

    /// The earliest time (data-plane clock) an instance not yet suspected will be
    /// if no heartbeat arrives (None: nothing to watch).
    pub fn next_deadline(&self) -> Option<u64> {
        [self.health.next_deadline(), self.seawall.next_deadline()]
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
        let suspect_ns = self.health.suspect_ns;
        let mut newly = Vec::new();
        for (port, h) in self.health.instances.iter_mut() {
            if h.suspected {
                continue;
            }
            if let Some(t) = h.last_hb {
                let deadline = t + suspect_ns;
                if now_ns > deadline {
                    h.suspected = true;
                    h.lease.restart_drain();
                    newly.push((*port, h.name.clone(), deadline));
                }
            }
        }
        if newly.is_empty() {
            return false;
        }
        let groups = self.refresh_groups();
        let applied = clock() / 1000;
        self.stats.failovers += newly.len() as u64;
        self.health.log(
            newly
                .into_iter()
                .map(|(port, name, deadline)| FailoverEvent {
                    instance: name,
                    port,
                    reason: "heartbeat".into(),
                    suspected_at_us: deadline / 1000,
                    detected_at_us: now_ns / 1000,
                    applied_at_us: applied,
                    rejoined_at_us: None,
                    groups,
                }),
        );
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
        let Some(h) = self.health.instances.get_mut(&port) else {
            return false;
        };
        if h.exited {
            return false;
        }
        // Already suspected by its silence: only local-state groups change now.
        let was_suspected = std::mem::replace(&mut h.suspected, true);
        h.exited = true;
        h.lease.restart_drain();
        let name = h.name.clone();
        if was_suspected {
            // Its failover event was logged when it fell silent; only local-state
            // groups, which ignore silence, move its flows now.
            let local = self.groups.local_state_targets(Output::Port(PortId(port)));
            if local {
                self.refresh_groups();
            }
            return local;
        }
        let groups = self.refresh_groups();
        self.stats.failovers += 1;
        self.health.log([FailoverEvent {
            instance: name,
            port,
            reason: "exited".into(),
            suspected_at_us: now_ns / 1000,
            detected_at_us: now_ns / 1000,
            applied_at_us: clock() / 1000,
            rejoined_at_us: None,
            groups,
        }]);
        true
    }

    /// Records a heartbeat from the instance on `port`; a suspected instance
    /// rejoins (its groups are restored) at once.
    pub(super) fn heartbeat(&mut self, port: u16, hb: InstanceHeartbeat) {
        self.stats.heartbeats += 1;
        let now = self.now_ns;
        let Some(h) = self.health.instances.get_mut(&port) else {
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
                .health
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
        self.health
            .instances
            .get(&port)
            .is_some_and(|h| h.suspected)
    }

    /// Instance health (`alive` is left false: the supervisor knows it).
    pub fn health_report(&self) -> Vec<InstanceHealth> {
        self.health
            .instances
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
        &self.health.events
    }
}
