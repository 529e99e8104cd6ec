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

/// Default time without a heartbeat after which an instance is suspected, at
/// least: the floor of the adaptive timeout (`Arrivals::timeout`). Measured
/// by `sluice experiment chaos --soak 600` at load average 6-7 on 2 cores:
/// live instances' heartbeats went silent for 31-125 ms (the agent read
/// them late or the kernel delivered them late, every instance of a host at
/// once), and a 30 ms floor failed them over 80 times in 10 minutes. The
/// jitter comes in rare bursts, so the deviation the adaptive part learns
/// stays small; the floor must cover the bursts. An exited instance is
/// acted on at once whatever this is.
pub const DEFAULT_SUSPECT_NS: u64 = 150_000_000;
/// The adaptive timeout's ceiling: an instance whose heartbeats have been very
/// irregular is still suspected after this much silence. A crashed or killed
/// instance is acted on sooner, when its process exits
/// ([`Dataplane::instance_exited`]); this bounds only a hung one.
pub const MAX_SUSPECT_NS: u64 = 250_000_000;
/// Intervals observed before the timeout adapts; until then the floor applies.
const MIN_SAMPLES: usize = 8;
/// Intervals the statistics remember: with 10 ms heartbeats, the last 1.3 s.
const WINDOW: usize = 128;
/// Standard deviations past the mean interval before a silence is suspicious:
/// the normal approximation of the phi-accrual detector (Hayashibara et al.,
/// 2004, as Akka and Cassandra use it) at phi = 8, a 1e-8 chance that a live
/// instance's next heartbeat is this late if intervals keep their distribution.
const PHI_Z: f64 = 5.6;
/// A floor on the deviation, so that perfectly regular heartbeats (an idle
/// machine) do not shrink the margin to nothing.
const MIN_STD_US: f64 = 2_000.0;
/// Failover events kept for status.
const MAX_EVENTS: usize = 256;
/// A health check this long after the previous one means the agent itself
/// did not run in between (its loop wakes at least every 10 ms): descheduled,
/// stopped, a machine-wide stall. It saw nothing of that time, so the
/// instances' silence over it is not held against them (measured by `sluice
/// experiment chaos`'s soak: bursts of false failovers naming every instance
/// of a host at once, under a load of 6-11 on 2 cores).
pub const STALL_NS: u64 = 50_000_000;

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
    /// Its heartbeats' inter-arrival times.
    arrivals: Arrivals,
}

/// Heartbeat inter-arrival statistics of one instance: the mean and variance
/// of its last [`WINDOW`] intervals, from which the silence that makes it
/// suspected follows. Under load (a busy core, a slow store) heartbeats arrive
/// late and irregularly; a fixed timeout then fails over live instances (issue
/// 22 counted 45 such failovers in 10 minutes), while an adaptive one widens
/// with the jitter it has seen and narrows again when it calms down.
#[derive(Debug, Clone, Copy)]
pub(super) struct Arrivals {
    /// Intervals, µs, a ring of the last `len` (at most [`WINDOW`]).
    ring: [u32; WINDOW],
    len: usize,
    next: usize,
    /// Exact sums over the ring (no drift from adding and removing floats).
    sum: u64,
    sum_sq: u128,
}

impl Default for Arrivals {
    fn default() -> Arrivals {
        Arrivals {
            ring: [0; WINDOW],
            len: 0,
            next: 0,
            sum: 0,
            sum_sq: 0,
        }
    }
}

impl Arrivals {
    /// Adds one interval between heartbeats, forgetting the oldest when the
    /// window is full.
    fn observe(&mut self, interval_ns: u64) {
        let x = u32::try_from(interval_ns / 1000).unwrap_or(u32::MAX);
        if self.len == WINDOW {
            let old = self.ring[self.next];
            self.sum -= u64::from(old);
            self.sum_sq -= u128::from(old) * u128::from(old);
        } else {
            self.len += 1;
        }
        self.ring[self.next] = x;
        self.next = (self.next + 1) % WINDOW;
        self.sum += u64::from(x);
        self.sum_sq += u128::from(x) * u128::from(x);
    }

    /// How long a silence may last before the instance is suspected: the mean
    /// interval plus [`PHI_Z`] deviations, within `[floor, ceiling]`; `floor`
    /// until [`MIN_SAMPLES`] intervals are known.
    fn timeout(&self, floor: u64, ceiling: u64) -> u64 {
        if self.len < MIN_SAMPLES {
            return floor;
        }
        let n = self.len as f64;
        let mean_us = self.sum as f64 / n;
        let var_us2 = (self.sum_sq as f64 / n - mean_us * mean_us).max(0.0);
        let t_us = mean_us + PHI_Z * var_us2.sqrt().max(MIN_STD_US);
        ((t_us * 1000.0) as u64).clamp(floor, ceiling.max(floor))
    }
}

impl InstanceState {
    /// Never heard from: it may still be starting.
    pub(super) fn starting(&self) -> bool {
        self.last_hb.is_none()
    }
}

/// The health of this host's NF instances.
#[derive(Debug, Clone)]
pub(super) struct Health {
    /// By instance port.
    pub(super) instances: BTreeMap<u16, InstanceState>,
    /// Failover events, oldest first (at most [`MAX_EVENTS`]).
    events: Vec<FailoverEvent>,
    /// Time without a heartbeat after which an instance is suspected.
    pub(super) suspect_ns: u64,
    /// When health was last checked (None: not yet).
    last_check_ns: Option<u64>,
    /// The loop read its receive queue before this check
    /// ([`Dataplane::read_before_suspecting`]): Some(whether datagrams were
    /// still waiting after the read).
    confirm: Option<bool>,
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
            last_check_ns: None,
            confirm: None,
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
        self.last_check_ns = old.last_check_ns;
    }

    /// Notes a check at `now_ns`; after a stall of this agent (see
    /// [`STALL_NS`]) moves every instance's last heartbeat forward by the
    /// stall, never past `now_ns`, so each gets its whole timeout from now.
    /// Returns whether it was a stall.
    fn checked_at(&mut self, now_ns: u64) -> bool {
        let prev = self.last_check_ns.replace(now_ns);
        let Some(gap) = prev.map(|p| now_ns.saturating_sub(p)) else {
            return false;
        };
        if gap <= STALL_NS {
            return false;
        }
        for h in self.instances.values_mut() {
            if let Some(t) = h.last_hb.as_mut() {
                *t = t.saturating_add(gap).min(now_ns);
            }
        }
        true
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
            .filter_map(|h| h.last_hb.map(|t| t + self.timeout(h)))
            .min()
    }

    /// How long `h` may stay silent before it is suspected.
    fn timeout(&self, h: &InstanceState) -> u64 {
        h.arrivals.timeout(self.suspect_ns, MAX_SUSPECT_NS)
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

    /// Whether an instance not yet suspected is past its deadline at `now_ns`.
    ///
    /// Heartbeats share the Geneve socket's queue with the instances' data:
    /// when the agent falls behind, every instance's heartbeat waits in that
    /// queue at once, and acting on the silence would fail over every
    /// instance of the host together (what `sluice experiment chaos`'s soak
    /// showed). So the loop asks this first and, if it holds, reads what is
    /// waiting ([`Dataplane::read_before_suspecting`]) before
    /// [`Dataplane::check_health`] decides.
    pub fn suspicion_due(&self, now_ns: u64) -> bool {
        // Other shards hear no heartbeats: the control shard decides.
        self.shard.control() && self.health.next_deadline().is_some_and(|d| now_ns > d)
    }

    /// Records that the loop read its receive queue before acting on a
    /// silence, and whether datagrams were still waiting after the bounded
    /// read (`backlog`). While they were, an instance's latest heartbeat may
    /// be among them, so the next [`Dataplane::check_health`] holds silence
    /// against an instance only past the ceiling ([`MAX_SUSPECT_NS`]), which
    /// still bounds how long a hung instance keeps its traffic.
    pub fn read_before_suspecting(&mut self, backlog: bool) {
        self.stats.health_confirms += 1;
        if backlog {
            self.stats.health_backlogs += 1;
        }
        self.health.confirm = Some(backlog);
    }

    /// The earliest time (data-plane clock) an instance not yet suspected will be
    /// if no heartbeat arrives (None: nothing to watch).
    pub fn next_deadline(&self) -> Option<u64> {
        let health = self
            .shard
            .control()
            .then(|| self.health.next_deadline())
            .flatten();
        [health, self.seawall.next_deadline()]
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
        if !self.shard.control() {
            // It hears no heartbeats; it takes the control shard's view
            // (`adopt_health`).
            return false;
        }
        if self.health.checked_at(now_ns) {
            self.stats.agent_stalls += 1;
        }
        let (floor, ceiling) = (self.health.suspect_ns, MAX_SUSPECT_NS);
        // Behind on reading: only the ceiling is evidence (see `read_before_suspecting`).
        let confirm = self.health.confirm.take();
        let floor = if confirm == Some(true) {
            ceiling.max(floor)
        } else {
            floor
        };
        let mut newly = Vec::new();
        for (port, h) in self.health.instances.iter_mut() {
            if h.suspected {
                continue;
            }
            if let Some(t) = h.last_hb {
                let deadline = t + h.arrivals.timeout(floor, ceiling);
                if now_ns > deadline {
                    h.suspected = true;
                    h.lease.restart_drain();
                    newly.push((*port, h.name.clone(), deadline));
                }
            }
        }
        if newly.is_empty() {
            if confirm.is_some() {
                self.stats.health_cleared += 1;
            }
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
                    silence_us: None,
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
            silence_us: None,
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
        let silence = h.last_hb.map(|last| now.saturating_sub(last));
        // A late heartbeat is what the statistics are for, even one that came
        // after the instance was suspected: the next such delay must not fail
        // it over again. A silence past the ceiling (a pause, a restart) says
        // nothing about how regularly it heartbeats when it runs.
        if let (Some(last), false) = (h.last_hb, h.exited) {
            let gap = now.saturating_sub(last);
            if gap <= MAX_SUSPECT_NS.max(self.health.suspect_ns) {
                h.arrivals.observe(gap);
            }
        }
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
                e.silence_us = silence.map(|g| g / 1000);
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

    /// Instance health. `alive` is the data plane's half: false from its
    /// process's exit until its new process's first heartbeat (the agent
    /// restarts a dead instance at once, and the controller must still see
    /// that it died); the supervisor's half, whether a process runs, is
    /// added by the control plane.
    pub fn health_report(&self) -> Vec<InstanceHealth> {
        self.health
            .instances
            .iter()
            .map(|(port, h)| InstanceHealth {
                name: h.name.clone(),
                port: *port,
                alive: !h.exited,
                suspected: h.suspected,
                last_heartbeat_age_ms: h.last_hb.map(|t| self.now_ns.saturating_sub(t) / 1_000_000),
                rx_packets: h.hb.rx_packets,
                tx_packets: h.hb.tx_packets,
                drops: h.hb.drops,
                queue_drops: h.hb.queue_drops,
                cpu_ms: h.hb.cpu_us / 1000,
                lease_epoch: h.hb.lease_epoch,
                cache_hits: h.hb.cache_hits,
                store_round_trips: h.hb.store_round_trips,
                added_latency: h.hb.added_latency,
                replica: [
                    h.hb.replica_waits,
                    h.hb.replica_rewaits,
                    h.hb.replica_shortfalls,
                ],
            })
            .collect()
    }

    /// Failover events, oldest first.
    pub fn failover_events(&self) -> &[FailoverEvent] {
        &self.health.events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn learned(intervals: impl IntoIterator<Item = u64>) -> Arrivals {
        let mut a = Arrivals::default();
        for i in intervals {
            a.observe(i);
        }
        a
    }

    #[test]
    fn the_floor_holds_until_enough_intervals_are_known() {
        let a = learned([200 * MS; MIN_SAMPLES - 1]);
        assert_eq!(a.timeout(30 * MS, MAX_SUSPECT_NS), 30 * MS);
        let a = learned([200 * MS; MIN_SAMPLES]);
        let t = a.timeout(30 * MS, MAX_SUSPECT_NS);
        assert!((211 * MS..212 * MS).contains(&t), "200 + 5.6 × 2 ms: {t}");
    }

    #[test]
    fn regular_heartbeats_keep_the_floor() {
        // 10 ms ± nothing: mean + 5.6 × the 2 ms minimum deviation is 21 ms.
        let a = learned([10 * MS; 100]);
        assert_eq!(a.timeout(30 * MS, MAX_SUSPECT_NS), 30 * MS);
        // With a lower floor the margin shows.
        let t = a.timeout(MS, MAX_SUSPECT_NS);
        assert!((21 * MS..22 * MS).contains(&t), "{t}");
    }

    #[test]
    fn jitter_widens_the_timeout_and_calm_narrows_it_again() {
        // A loaded machine: heartbeats 5 or 45 ms apart (mean 25, deviation 20).
        let mut a = learned((0..200).map(|i| if i % 2 == 0 { 5 * MS } else { 45 * MS }));
        let loaded = a.timeout(30 * MS, MAX_SUSPECT_NS);
        assert!(
            (100 * MS..MAX_SUSPECT_NS).contains(&loaded),
            "about 25 + 5.6 × 20 ms: {loaded}"
        );
        for _ in 0..WINDOW {
            a.observe(10 * MS);
        }
        assert_eq!(a.timeout(30 * MS, MAX_SUSPECT_NS), 30 * MS);
    }

    #[test]
    fn the_ceiling_bounds_the_timeout_and_never_undercuts_the_floor() {
        let a = learned((0..100).map(|i| if i % 2 == 0 { MS } else { 400 * MS }));
        assert_eq!(a.timeout(30 * MS, MAX_SUSPECT_NS), MAX_SUSPECT_NS);
        assert_eq!(a.timeout(300 * MS, MAX_SUSPECT_NS), 300 * MS);
    }
}
