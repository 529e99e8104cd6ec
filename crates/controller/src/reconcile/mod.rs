//! The controller's sans-IO core: the [`Reconciler`] owns the desired state (what
//! tenants asked for, where instances run) and the observed state (what agents
//! report), and turns requests, heartbeats and the passing of time into new
//! desired states and the pushes that carry them to the hosts.
//!
//! Nothing here reads a clock or touches a socket: every entry point takes `now`
//! (an [`Instant`] the caller read), and what must be done outside (send a host
//! its configuration, ask an agent for its pinned flows) is queued as
//! [`Effects`] for the caller to collect with [`Reconciler::take_effects`]. The
//! HTTP edge, the ticker thread and the pusher (`crate::service`) are the only
//! callers in the running controller; the tests drive it with a simulated clock.
//!
//! Every change works on a copy of the desired state: place, compile every
//! tenant, derive every host's configuration; only if all of that succeeds is
//! the copy persisted (one transaction, through the [`Store`]) and swapped in,
//! and the hosts whose configuration changed get a new version and a push.
//!
//! The behaviours live in submodules: `health` (heartbeats, instance health,
//! host silence), `drains` (drains and catch-ups of pinned middleboxes),
//! `instance_drains` (an operator's drain of one NF instance),
//! `autoscale` (scalers fed by reported or measured metrics), `leases` (the
//! lease gate of `state: cached` middleboxes).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use sluice_proto::{AgentConfig, ChainMeasure, PinnedFlows};

use crate::desired::{versioned, Desired, InstanceKey};
use crate::error::ApiError;
use crate::lease::{Decision as LeaseDecision, LeaseGate};
use crate::store::{Store, StoreError, Touched};

mod autoscale;
pub(crate) mod backends;
mod blocks;
pub mod consolidation;
mod containment;
pub mod distribution;
mod drains;
mod events;
mod fabric;
mod health;
mod instance_drains;
mod leases;
mod maintenance;
mod pushes;
mod requests;
#[cfg(test)]
mod tests;

pub use backends::BACKEND_STATES;
pub use containment::{AccusationInfo, ContainmentInfo, ACCUSATION_TTL, DEFAULT_THRESHOLD};
pub use drains::caught_up;
pub use events::{event, Events, EVENTS_KEPT};
pub use health::Heartbeat;
pub use requests::Applied;

/// A host is alive if heard from within this long.
pub const ALIVE: Duration = Duration::from_secs(1);
/// A heartbeat with a stale version re-pushes at most this often.
pub const REPUSH_AFTER: Duration = Duration::from_secs(1);
/// A host of a small fleet (agents heartbeating every 50 ms) not heard from
/// for this long has all its instances suspected (its agent may be gone); a
/// larger fleet's hosts, told to heartbeat less often, get six of their
/// intervals ([`crate::liveness::silent_after`]).
pub const HOST_SILENT: Duration = Duration::from_millis(300);
/// A host of a small fleet silent for this long is taken for dead: its
/// instances are placed again on live hosts (a middlebox whose only instance
/// ran there has none until then), and it takes no new ones until heard again.
/// A larger fleet's hosts get as much longer as their silence threshold is
/// ([`crate::liveness::dead_after`]).
pub const HOST_GRACE: Duration = Duration::from_secs(10);
/// A down instance rejoins once reported healthy for this long (one missed
/// agent heartbeat's worth), so a flapping instance does not churn every host.
pub const REJOIN_AFTER: Duration = Duration::from_millis(100);
/// How long an instance must stay suspected (alive but silent), report after
/// report, before the controller takes it out of every host's groups. The agent
/// of its host has already moved its flows locally within the suspicion timeout;
/// the controller's global rewrite follows only a lasting silence, so a loaded
/// instance that misses a heartbeat now and then does not make it push new
/// configurations to every host several times a second. A dead process is
/// acted on at once.
pub const SUSPECT_CONFIRM: Duration = Duration::from_millis(150);
/// How long a removed local-state instance drains unless the request says.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest a new instance of a pinned middlebox gets most new flows: by then
/// the flows pinned elsewhere have had time to end, or they never will.
pub const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(60);
/// How often a host is asked for its pinned flows while a drain or catch-up
/// waits for them.
pub const DRAIN_POLL: Duration = Duration::from_millis(100);

/// What the controller knows about a host beyond its registration (not durable).
#[derive(Debug, Default)]
pub(crate) struct Live {
    pub(crate) last_heard: Option<Instant>,
    pub(crate) reported: Option<u64>,
    /// The version last pushed, and when its push started (while in flight)
    /// or ended.
    pub(crate) last_push: Option<(u64, Instant)>,
    /// A push to it is queued, and one is in flight. While either is, a
    /// heartbeat the agent sent before it applied the push must not queue the
    /// same version again: it would go whole, the agent having acknowledged
    /// that version already.
    pub(crate) push_queued: bool,
    pub(crate) push_in_flight: bool,
    pub(crate) push_error: Option<String>,
    /// The heartbeat interval its last answer told it: it may sleep that long
    /// between heartbeats even after the fleet's interval shrank.
    pub(crate) told: Option<Duration>,
    failures: u32,
    /// Its heartbeats carry instance health: its silence suspects its instances
    /// (hosts that only register are not watched).
    reports_health: bool,
}

/// Why an instance is out of its groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DownReason {
    /// Its agent reported it dead or suspected.
    Reported,
    /// Its host went silent.
    HostSilent,
}

/// What the reconciler asks its caller to do: the I/O its decisions need.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Effects {
    /// Hosts to send their current configuration to, no earlier than the time
    /// given (a retry waits for its backoff).
    pub pushes: BTreeMap<u32, Instant>,
    /// Hosts (and their API URLs) to ask for their pinned flows; the answer goes
    /// to [`Reconciler::pinned_report`].
    pub polls: BTreeMap<u32, String>,
}

impl Effects {
    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.pushes.is_empty() && self.polls.is_empty()
    }
}

/// Configurations derived from a desired state, versions not yet given.
#[derive(Debug, Clone)]
pub(crate) enum Derived {
    /// Every host's.
    Full(BTreeMap<u32, AgentConfig>),
    /// Only of the hosts a change can alter; every other host's stays as the
    /// reconciler holds it.
    Partial(BTreeMap<u32, AgentConfig>),
}

impl Derived {
    /// The configurations derived.
    pub(crate) fn map(&self) -> &BTreeMap<u32, AgentConfig> {
        match self {
            Derived::Full(c) | Derived::Partial(c) => c,
        }
    }
}

/// A configuration to send: the pusher's job for one host.
#[derive(Debug, Clone, PartialEq)]
pub struct PushJob {
    /// The agent's API base URL.
    pub api: String,
    /// What it must run.
    pub config: AgentConfig,
}

/// The controller's state and every decision it makes (see the module docs).
pub struct Reconciler {
    pub(crate) desired: Desired,
    pub(crate) configs: BTreeMap<u32, AgentConfig>,
    store: Box<dyn Store>,
    state_url: String,
    pub(crate) live: BTreeMap<u32, Live>,
    /// Why each instance of `desired.down` is down.
    down_reason: BTreeMap<InstanceKey, DownReason>,
    /// When each drain under way started, and its timeout.
    drains: BTreeMap<InstanceKey, (Instant, Duration)>,
    /// When each catching-up instance started catching up.
    catch_ups: BTreeMap<InstanceKey, Instant>,
    /// Latest chain measurements per host (cumulative counters).
    chain_reports: BTreeMap<u32, Vec<ChainMeasure>>,
    /// Latest per-peer fabric counters per host (cumulative).
    peer_reports: BTreeMap<u32, Vec<sluice_proto::PeerTraffic>>,
    /// What the rack uplinks carried, from `peer_reports`.
    uplink_meter: crate::uplinks::UplinkMeter,
    /// Latest counters of each instance, by name, as its host reported them.
    instance_counts: BTreeMap<String, crate::traffic::InstanceCounts>,
    /// Per-chain and per-instance rates over time (the dashboard's).
    pub(crate) traffic: crate::traffic::Traffic,
    /// Agent-metric samplers by `(tenant, chain)`.
    pub(crate) samplers: BTreeMap<(String, String), autoscale::AgentSampler>,
    /// Latest pinned-flow report per host: (its config version, the flows, when).
    pinned: BTreeMap<u32, (u64, Vec<PinnedFlows>, Instant)>,
    pub(crate) scalers: BTreeMap<(String, String), autoscale::ChainScaler>,
    pub(crate) events: Events,
    /// Drain timeouts asked for by scale requests, by instance.
    drain_timeouts: BTreeMap<InstanceKey, Duration>,
    /// Down instances reported healthy since (see [`REJOIN_AFTER`]).
    healthy_since: BTreeMap<InstanceKey, Instant>,
    /// Instances reported suspected (alive) since (see [`SUSPECT_CONFIRM`]).
    suspected_since: BTreeMap<InstanceKey, Instant>,
    /// Ownership leases of `state: cached` middleboxes.
    gate: LeaseGate,
    /// When the reconciler started: the scalers' clock counts from here.
    started: Instant,
    /// Unix time (ms) at `started`: event times and lease deadlines derive
    /// from `now`, never from the system clock.
    started_unix_ms: u64,
    /// When [`Reconciler::tick`] last ran.
    last_tick: Option<Instant>,
    /// A fabric key rotation under way: the configuration version each host
    /// must run (it holds the new key) before hosts seal with it.
    fabric_rotation: Option<BTreeMap<u32, u64>>,
    /// When each host was last polled for its pinned flows.
    last_poll: BTreeMap<u32, Instant>,
    effects: Effects,
    /// Counters for `/metrics`.
    counters: crate::metrics::Counters,
    /// Accusations of hosts by hosts, and releases.
    containment: containment::Containment,
    /// The state store's health, from the probes of its nodes.
    store_health: crate::store_health::StoreHealth,
    /// This controller leads replicated ones (None: a single controller).
    leader: Option<crate::model::LeaderInfo>,
    /// Replicated controllers: every one running, from etcd.
    controllers: Vec<crate::model::ControllerMember>,
    /// Health of the load balancers' backends.
    pub(crate) backends: backends::Backends,
    /// Chain byte counters as the distribution last sampled them.
    dist: distribution::Sampler,
    /// Consolidated groups' CPU samples ([`consolidation`]).
    cpu: consolidation::CpuSampler,
    /// Latest cumulative CPU time of each instance, ms, by name.
    cpu_reports: BTreeMap<String, u64>,
    /// The consolidated groups' last prediction.
    comb_view: Option<consolidation::CombView>,
    /// Each tenant's last distribution decision.
    distributions: BTreeMap<String, distribution::TenantDistribution>,
    /// Declared rack uplink capacities, bytes per second.
    uplinks: BTreeMap<String, f64>,
    /// Target utilisation of declared uplinks.
    uplink_target: f64,
    distribution_classes: bool,
}

impl Reconciler {
    /// Starts from what `store` holds. The stored configurations are what agents
    /// were told; they are recomputed to catch a compiler that changed since,
    /// bumping versions only where the output differs. `now` and `unix_ms` are
    /// the same moment on the monotonic and the wall clock.
    pub fn start(
        store: Box<dyn Store>,
        state_url: &str,
        now: Instant,
        unix_ms: u64,
    ) -> Result<Reconciler, StartError> {
        let registry = sluice_builtin::registry();
        let mut store = store;
        let (desired, stored) = store.load(Some(&registry))?;
        let mut configs = desired.configs(state_url)?;
        let mut gate = LeaseGate::restarted(&stored, unix_ms);
        if let LeaseDecision::Hold(held) = gate.decide(&stored, &mut configs, unix_ms) {
            // Pushed again as they were until the agents confirm them (see
            // `LeaseGate::restarted`); the ticker then commits the desired state.
            configs = held;
        }
        let changed = versioned(&stored, &mut configs);
        if !changed.is_empty() {
            store.save(&desired, &configs)?;
        }
        Ok(Reconciler {
            desired,
            configs,
            store,
            state_url: state_url.to_string(),
            live: BTreeMap::new(),
            down_reason: BTreeMap::new(),
            drains: BTreeMap::new(),
            catch_ups: BTreeMap::new(),
            chain_reports: BTreeMap::new(),
            peer_reports: BTreeMap::new(),
            uplink_meter: crate::uplinks::UplinkMeter::default(),
            instance_counts: BTreeMap::new(),
            traffic: crate::traffic::Traffic::default(),
            samplers: BTreeMap::new(),
            pinned: BTreeMap::new(),
            scalers: BTreeMap::new(),
            events: Events::default(),
            drain_timeouts: BTreeMap::new(),
            healthy_since: BTreeMap::new(),
            suspected_since: BTreeMap::new(),
            gate,
            started: now,
            started_unix_ms: unix_ms,
            last_tick: None,
            fabric_rotation: None,
            last_poll: BTreeMap::new(),
            effects: Effects::default(),
            counters: crate::metrics::Counters::default(),
            containment: containment::Containment::default(),
            store_health: crate::store_health::StoreHealth::new(&[], false, String::new()),
            leader: None,
            controllers: Vec::new(),
            backends: backends::Backends::default(),
            dist: distribution::Sampler::default(),
            cpu: consolidation::CpuSampler::default(),
            cpu_reports: BTreeMap::new(),
            comb_view: None,
            distributions: BTreeMap::new(),
            uplinks: BTreeMap::new(),
            uplink_target: crate::distribution::DEFAULT_TARGET,
            distribution_classes: true,
        })
    }

    /// The desired state.
    pub fn desired(&self) -> &Desired {
        &self.desired
    }

    /// Every host's current configuration.
    pub fn configs(&self) -> &BTreeMap<u32, AgentConfig> {
        &self.configs
    }

    /// The event log.
    pub fn events(&self) -> &Events {
        &self.events
    }

    /// What the caller must do since the last call (pushes, polls).
    pub fn take_effects(&mut self) -> Effects {
        std::mem::take(&mut self.effects)
    }

    /// Unix time (ms) at `now`, on the clock the reconciler started with.
    pub fn unix_ms(&self, now: Instant) -> u64 {
        self.started_unix_ms + now.saturating_duration_since(self.started).as_millis() as u64
    }

    /// The scalers' clock at `now`, ns since the reconciler started.
    fn clock_ns(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.started).as_nanos() as u64
    }

    /// Appends an event at `now`; returns its id.
    pub(crate) fn push_event(&mut self, e: crate::model::EventInfo, now: Instant) -> u64 {
        let ms = self.unix_ms(now);
        self.events.push(e, ms)
    }

    /// Makes `next` the desired state if every host's configuration can be
    /// derived from it: persists it, bumps versions of changed hosts and schedules
    /// their pushes. Returns the changed hosts and their new versions.
    pub(crate) fn commit(
        &mut self,
        next: Desired,
        now: Instant,
    ) -> Result<BTreeMap<u32, u64>, ApiError> {
        let cfgs = next.configs(&self.state_url)?;
        self.commit_derived(next, Derived::Full(cfgs), Touched::default(), now)
    }

    /// [`Reconciler::commit_derived`] of a [`Derived::Partial`]: the other
    /// hosts keep their configurations (and versions) as they are. `next`
    /// None: the reconciler's desired state is already the next one (changed
    /// in place, see [`Reconciler::commit_in_place`]). Only the rows of
    /// `touched`'s tenants and hosts are compared and saved (debug builds
    /// check that nothing else changed).
    fn commit_partial(
        &mut self,
        next: Option<Desired>,
        mut cfgs: BTreeMap<u32, AgentConfig>,
        mut touched: Touched,
        now: Instant,
    ) -> Result<BTreeMap<u32, u64>, ApiError> {
        #[cfg(debug_assertions)]
        if let Some(next) = &next {
            if let Some(d) = self.desired.differs_outside(next, &touched) {
                panic!("a change said to touch {touched:?} also changed {d}");
            }
        }
        let changed = versioned(&self.configs, &mut cfgs);
        let mut before = Vec::with_capacity(changed.len());
        for h in &changed {
            if let Some(c) = cfgs.remove(h) {
                before.push((*h, self.configs.insert(*h, c)));
            }
        }
        touched.configs = changed.iter().copied().collect();
        let saved = self.store.save_touched(
            next.as_ref().unwrap_or(&self.desired),
            &self.configs,
            &touched,
        );
        if let Err(e) = saved {
            // Nothing changes: the hosts' configurations go back.
            for (h, c) in before {
                match c {
                    Some(c) => self.configs.insert(h, c),
                    None => self.configs.remove(&h),
                };
            }
            return Err(e.into());
        }
        if let Some(next) = next {
            self.desired = next;
        }
        Ok(self.announce(changed, now))
    }

    /// The new versions of the `changed` hosts' configurations, logged, and
    /// their pushes scheduled.
    fn announce(&mut self, changed: Vec<u32>, now: Instant) -> BTreeMap<u32, u64> {
        let out: BTreeMap<u32, u64> = changed
            .iter()
            .map(|h| (*h, self.configs[h].version))
            .collect();
        if !out.is_empty() {
            tracing::info!(versions = ?out, "new configuration versions (host: version)");
        }
        for h in changed {
            self.schedule_push(h, now);
        }
        out
    }

    /// [`Reconciler::commit`] of a change that can alter the configurations of
    /// the hosts in `scope` only (a tenant's hosts before and after, a host
    /// registering and its peers): only those are derived, compared and
    /// saved, so the work follows the change, not the fleet. Falls back to
    /// the whole fleet's derivation where a scope is not enough (see
    /// [`Reconciler::derive`]).
    /// `touched`: the tenants and hosts whose stored rows the change may
    /// alter ([`Touched`]).
    pub(crate) fn commit_scoped(
        &mut self,
        next: Desired,
        scope: &BTreeSet<u32>,
        touched: Touched,
        now: Instant,
    ) -> Result<BTreeMap<u32, u64>, ApiError> {
        let cfgs = self.derive(&next, Some(scope))?;
        self.commit_derived(next, cfgs, touched, now)
    }

    /// [`Reconciler::commit_scoped`] of a change already made to the
    /// desired state in place (no copy of the whole state: a host's
    /// registration at 5,000 hosts spent most of its time copying it).
    /// `undo` restores the state as it was: called if the change cannot be
    /// derived or saved, so a refused change still changes nothing. Where
    /// the scope is not enough (see [`Reconciler::derive`]) the change
    /// goes through [`Reconciler::commit_derived`] on a copy as any other.
    pub(crate) fn commit_in_place(
        &mut self,
        scope: &BTreeSet<u32>,
        touched: Touched,
        undo: impl FnOnce(&mut Desired),
        now: Instant,
    ) -> Result<BTreeMap<u32, u64>, ApiError> {
        match self.derive(&self.desired, Some(scope)) {
            Ok(Derived::Partial(cfgs)) => {
                let r = self.commit_partial(None, cfgs, touched, now);
                if r.is_err() {
                    undo(&mut self.desired);
                }
                r
            }
            Ok(full) => {
                let next = self.desired.clone();
                undo(&mut self.desired);
                self.commit_derived(next, full, touched, now)
            }
            Err(e) => {
                undo(&mut self.desired);
                Err(e)
            }
        }
    }

    /// `next`'s configurations: of the hosts in `scope` only if given and
    /// the change allows it ([`Derived::Partial`]: no lease gate at work, no
    /// host gone, every new host in the scope), else of every host.
    pub(crate) fn derive(
        &self,
        next: &Desired,
        scope: Option<&BTreeSet<u32>>,
    ) -> Result<Derived, ApiError> {
        // Debug builds (every test): the indexes kept with the state are
        // what recomputing them gives.
        #[cfg(debug_assertions)]
        next.check_indexes();
        let partial = scope.filter(|scope| {
            let added = scope
                .iter()
                .filter(|h| next.hosts.contains_key(h) && !self.configs.contains_key(h))
                .count();
            self.gate.idle()
                && next.hosts.len() == self.configs.len() + added
                && scope
                    .iter()
                    .all(|h| next.hosts.contains_key(h) || !self.configs.contains_key(h))
        });
        let Some(scope) = partial else {
            return Ok(Derived::Full(next.configs(&self.state_url)?));
        };
        let cfgs = next.configs_of(&self.state_url, Some(scope))?;
        #[cfg(debug_assertions)]
        self.check_partial(next, &cfgs);
        Ok(Derived::Partial(cfgs))
    }

    /// Debug builds (every test): a partial derivation and the configurations
    /// kept for the other hosts are exactly the whole fleet's derivation.
    #[cfg(debug_assertions)]
    fn check_partial(&self, next: &Desired, partial: &BTreeMap<u32, AgentConfig>) {
        let Ok(full) = next.configs(&self.state_url) else {
            panic!("a partial derivation succeeded where the whole one fails");
        };
        assert_eq!(
            full.keys().collect::<Vec<_>>(),
            self.configs
                .keys()
                .chain(partial.keys())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect::<Vec<_>>(),
            "hosts of a partial derivation"
        );
        for (h, want) in full {
            let mut got = partial
                .get(&h)
                .or_else(|| self.configs.get(&h))
                .cloned()
                .expect("every host has a configuration");
            got.version = 0;
            assert_eq!(got, want, "host {h}: partial derivation differs");
        }
    }

    /// [`Reconciler::commit`] with `next`'s configurations already derived
    /// (`next.configs(..)`, versions not yet given), so a caller that needed
    /// them first (an apply's plan) does not derive them twice.
    /// A partial derivation saves only the rows of `touched` (a whole one
    /// compares every row).
    pub(crate) fn commit_derived(
        &mut self,
        next: Desired,
        cfgs: Derived,
        touched: Touched,
        now: Instant,
    ) -> Result<BTreeMap<u32, u64>, ApiError> {
        let mut cfgs = match cfgs {
            Derived::Full(c) => c,
            Derived::Partial(c) => return self.commit_partial(Some(next), c, touched, now),
        };
        let was_holding = self.gate.holding();
        let now_ms = self.unix_ms(now);
        let held = match self.gate.decide(&self.configs, &mut cfgs, now_ms) {
            LeaseDecision::Apply => false,
            LeaseDecision::Hold(interim) => {
                cfgs = interim;
                true
            }
        };
        let changed = versioned(&self.configs, &mut cfgs);
        if held {
            self.gate.held_versions(&cfgs);
            if !was_holding {
                tracing::info!("leased split changing: leases revoked first; the new configuration follows once the agents confirm");
            }
        }
        if next != self.desired || !changed.is_empty() {
            self.store.save(&next, &cfgs)?;
        }
        self.desired = next;
        self.configs = cfgs;
        Ok(self.announce(changed, now))
    }

    /// Turns sealing of datagrams between hosts on or off (the controller's
    /// `--fabric-auth`): on keeps the stored fabric secret, or takes `fresh`
    /// (random, from the caller: the reconciler reads no RNG) when none is
    /// stored; off forgets it. Every host's configuration follows.
    pub fn set_fabric_auth(
        &mut self,
        on: bool,
        fresh: [u8; 32],
        now: Instant,
    ) -> Result<(), ApiError> {
        let mut next = self.desired.clone();
        next.fabric = match (on, next.fabric.take()) {
            (true, Some(f)) => Some(f),
            (true, None) => Some(crate::fabric::FabricSecret::new(fresh)),
            (false, _) => None,
        };
        self.commit(next, now).map(|_| ())
    }

    /// Queues a push of `host`'s configuration at `at` (the earlier wins).
    fn schedule_push(&mut self, host: u32, at: Instant) {
        self.live.entry(host).or_default().push_queued = true;
        let e = self.effects.pushes.entry(host).or_insert(at);
        if at < *e {
            *e = at;
        }
    }

    /// Runs the time-driven checks: host silence, agent-metric sampling, leases,
    /// drains and catch-ups. Call it often (the service does every 20 ms).
    pub fn tick(&mut self, now: Instant) {
        // A tick this late means the controller itself stalled (CPU, disk):
        // heartbeats may be queued unread, so silence proves nothing this time.
        let stalled = self
            .last_tick
            .is_some_and(|t| now.saturating_duration_since(t) > HOST_SILENT / 2);
        self.last_tick = Some(now);
        let silent = (!stalled).then(|| self.silent_hosts(now));
        if let Some(silent) = &silent {
            self.check_silence(silent, now);
        }
        self.check_backends(silent.as_ref(), now);
        if let Some(silent) = &silent {
            self.check_fabric_rotation(silent, now);
        }
        self.sample_agent_metrics(now);
        self.sample_traffic(now);
        self.check_distribution(now);
        self.check_consolidation(now);
        self.expire_accusations(now);
        self.check_leases(now);
        let mut polls = self.check_drains(now);
        polls.extend(self.check_catch_ups(now));
        for h in polls {
            if self
                .last_poll
                .get(&h)
                .is_some_and(|t| now.saturating_duration_since(*t) < DRAIN_POLL)
            {
                continue;
            }
            if let Some(x) = self.desired.hosts.get(&h) {
                self.last_poll.insert(h, now);
                self.effects.polls.insert(h, x.api.clone());
            }
        }
    }

    /// Watches the state store's nodes with `health` (the service sets it
    /// for a `redis://` or `redis-cluster://` state URL).
    pub fn set_store_health(&mut self, health: crate::store_health::StoreHealth) {
        self.store_health = health;
    }

    /// Records that this controller leads replicated ones (from `now`), and
    /// says so in the event feed.
    pub fn set_leader(&mut self, leader: crate::model::LeaderInfo, now: Instant) {
        let e = events::event(
            "leading",
            format!(
                "controller {} ({}) leads from etcd revision {} (lease {} s)",
                leader.name, leader.url, leader.term, leader.lease_s
            ),
        );
        self.push_event(e, now);
        self.leader = Some(leader);
    }

    /// Which replicated controller leads (this one), if replicated.
    pub fn leader(&self) -> Option<&crate::model::LeaderInfo> {
        self.leader.as_ref()
    }

    /// Records the replicated controllers running now (the leader reads
    /// their records in etcd).
    pub fn set_controllers(&mut self, members: Vec<crate::model::ControllerMember>) {
        self.controllers = members;
    }

    /// The replicated controllers last recorded (empty: a single controller).
    pub fn controllers(&self) -> &[crate::model::ControllerMember] {
        &self.controllers
    }

    /// The state store's health.
    pub fn store_health(&self) -> &crate::store_health::StoreHealth {
        &self.store_health
    }

    /// Takes in a round of store probes made at `now` (`took` in all): their
    /// events go to the feed; returns the markers to write (each written one
    /// goes to [`Reconciler::store_marked`]).
    pub fn store_probed(
        &mut self,
        probes: &[crate::store_health::Probe],
        took: Duration,
        now: Instant,
    ) -> crate::store_health::StoreActions {
        let (events, writes) = self.store_health.observe(probes, took, self.unix_ms(now));
        let (more, takeovers) = self.store_health.takeovers();
        let returned = events
            .iter()
            .any(|e| e.kind == "store_recovered" || e.kind == "store_lost_data");
        for e in events.into_iter().chain(more) {
            self.push_event(e, now);
        }
        crate::store_health::StoreActions {
            writes,
            takeovers,
            returned,
        }
    }

    /// A marker write of [`Reconciler::store_probed`] succeeded.
    pub fn store_marked(&mut self, w: &crate::store_health::MarkerWrite) {
        self.store_health.marked(w);
    }

    /// What the controller counted as it ran (`/metrics`).
    pub fn counters(&self) -> &crate::metrics::Counters {
        &self.counters
    }

    /// The pusher is about to send `host` its configuration: what to send
    /// (None if the host or its configuration is gone).
    pub fn push_started(&mut self, host: u32, now: Instant) -> Option<PushJob> {
        let api = self.desired.hosts.get(&host)?.api.clone();
        let config = self.configs.get(&host)?.clone();
        let live = self.live.entry(host).or_default();
        live.last_push = Some((config.version, now));
        live.push_queued = false;
        live.push_in_flight = true;
        let ms = self.unix_ms(now);
        self.events.pushed(host, config.version, ms);
        Some(PushJob { api, config })
    }

    /// The push to `host` ended (`Err`: why it failed); a failure schedules a
    /// retry with exponential backoff.
    pub fn push_finished(
        &mut self,
        host: u32,
        version: u64,
        result: Result<(), String>,
        now: Instant,
    ) {
        let live = self.live.entry(host).or_default();
        if let Some((v, started)) = live.last_push {
            if v == version {
                self.counters
                    .push_seconds
                    .observe(now.saturating_duration_since(started).as_secs_f64());
            }
            // A stale report is judged from the agent's answer on: one it sent
            // while applying this version may arrive just after.
            live.last_push = Some((v, now));
        }
        live.push_in_flight = false;
        match &result {
            Ok(()) => self.counters.pushes_ok += 1,
            Err(_) => self.counters.pushes_failed += 1,
        }
        match result {
            Ok(()) => {
                if live.push_error.is_some() {
                    tracing::info!(host, version, "push succeeded after failures");
                }
                live.push_error = None;
                live.failures = 0;
            }
            Err(e) => {
                if live.push_error.as_deref() != Some(e.as_str()) {
                    tracing::warn!(host, version, error = %e, "push failed (retrying)");
                }
                live.push_error = Some(e);
                live.failures = live.failures.saturating_add(1);
                let backoff = 100u64 << live.failures.min(6);
                self.schedule_push(host, now + Duration::from_millis(backoff.min(5000)));
            }
        }
    }

    /// An agent's answer to a poll for its pinned flows.
    pub fn pinned_report(
        &mut self,
        host: u32,
        version: u64,
        flows: Vec<PinnedFlows>,
        now: Instant,
    ) {
        self.pinned.insert(host, (version, flows, now));
    }

    /// Samples the rates of `GET /v1/traffic` when one is due.
    fn sample_traffic(&mut self, now: Instant) {
        let now_ms = self.unix_ms(now);
        if !self.traffic.due(now_ms) {
            return;
        }
        let mut o = crate::traffic::Observed::default();
        for (name, t) in &self.desired.tenants {
            for (i, c) in t.spec.chains.iter().enumerate() {
                let key = (name.clone(), c.name.clone());
                for (host, reports) in &self.chain_reports {
                    let mut n = 0u64;
                    let mut added = sluice_proto::LatencyHistogram::default();
                    // Both directions of the chain.
                    for m in reports
                        .iter()
                        .filter(|m| m.vni == t.vni && usize::from(m.chain / 2) == i)
                    {
                        n += m.packets;
                        added.add(&m.latency);
                    }
                    o.chains.insert((*host, key.clone()), n);
                    o.latency.insert((*host, key.clone()), added);
                }
                // The tenant's own instances (a range), not every tenant's:
                // at 10,000 tenants a scan of all was 10,000 x 30,000 keys
                // a second.
                let members = self
                    .desired
                    .tenant_instances(name)
                    .filter(|((_, mb, _), _)| c.path.contains(mb) || c.mirror.contains(mb))
                    .map(|((tn, mb, k), _)| crate::desired::instance_name(tn, mb, *k))
                    .collect();
                o.members.insert(key, members);
            }
        }
        // Only instances still placed: a removed one's counters are no rate.
        self.instance_counts
            .retain(|n, _| self.desired.instance_by_name(n).is_some());
        o.instances = self.instance_counts.clone();
        self.traffic.sample(now_ms, &o);
        // The uplinks, at the same cadence: every registered host's rack,
        // and what each reported sending each peer.
        self.peer_reports
            .retain(|h, _| self.desired.hosts.contains_key(h));
        let racks: BTreeMap<u32, String> = self
            .desired
            .hosts
            .keys()
            .map(|h| (*h, self.desired.rack_of(*h).to_string()))
            .collect();
        let counters = self
            .peer_reports
            .iter()
            .flat_map(|(h, ps)| ps.iter().map(move |p| ((*h, p.host), (p.packets, p.bytes))))
            .collect();
        self.uplink_meter.sample(now_ms, &counters, &racks);
    }

    /// The interval the fleet's agents are told to heartbeat at now (from the
    /// number of registered hosts, [`crate::liveness::heartbeat_interval`]).
    pub fn heartbeat_interval(&self) -> Duration {
        crate::liveness::heartbeat_interval(self.desired.hosts.len())
    }

    /// The longest interval a host may be heartbeating at: the one it was last
    /// told, or the fleet's `current` one if longer (it learns that only from
    /// its next heartbeat's answer).
    pub(crate) fn beats_every(live: &Live, current: Duration) -> Duration {
        live.told.map_or(current, |t| t.max(current))
    }

    /// How long `host` may go unheard before it counts as silent
    /// ([`crate::liveness::silent_after`] of the longest interval it may be
    /// heartbeating at).
    pub(crate) fn silent_after(&self, host: u32) -> Duration {
        let current = self.heartbeat_interval();
        let every = self
            .live
            .get(&host)
            .map_or(current, |l| Self::beats_every(l, current));
        crate::liveness::silent_after(every)
    }

    /// The longest heartbeat interval any host may be using (what an agent's
    /// lease grace follows, [`sluice_proto::lease_grace`]).
    pub(crate) fn longest_interval(&self) -> Duration {
        let current = self.heartbeat_interval();
        self.live
            .values()
            .map(|l| Self::beats_every(l, current))
            .fold(current, Duration::max)
    }

    /// How long ago `host` was last heard from, if ever.
    pub(crate) fn heard_ago(&self, host: u32, now: Instant) -> Option<Duration> {
        self.live
            .get(&host)
            .and_then(|l| l.last_heard)
            .map(|t| now.saturating_duration_since(t))
    }
}

/// A [`Reconciler`] could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The store could not be read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The stored state no longer compiles.
    #[error("stored state: {0}")]
    Place(#[from] crate::desired::PlaceError),
}
