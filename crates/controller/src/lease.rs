//! When NF instances of `state: cached` middleboxes may hold ownership leases,
//! sans-IO (docs/STATE.md, "Leases in the running system").
//!
//! An agent grants a lease on an instance's hash ranges only while the
//! controller marks the instance's group leased ([`GroupPolicy::lease_epoch`]).
//! The controller marks a group once every agent holding it has run its current
//! split for [`SETTLE_MS`] (so no packet steered by an older split is still in
//! flight), and never lets a leased group's split change in one step: a
//! configuration that would change it is held back, and the current one is
//! pushed again with the group's leases revoked ([`Decision::Hold`]). Only when
//! every agent holding the group acknowledged the revocation — or could no
//! longer be granting on its own ([`REVOKE_TIMEOUT_MS`]: agents grant only
//! while the controller answers and they run its version) — and the longest
//! lease has run out does the held configuration go out
//! ([`LeaseGate::barrier_done`]). Otherwise an instance could keep serving
//! cached records of flows another agent already sends elsewhere.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::time::Duration;

use sluice_proto::{AgentConfig, GroupPolicy};

/// A group: (tenant VNI, group id).
pub type GroupKey = (u32, u32);

/// Longest lease an agent grants, ms (its `LEASE_VALID_NS`), plus margin for
/// clocks read at different moments.
pub const LEASE_MS: u64 = 30;
/// How long every agent must have run a group's split before it is leased, ms.
pub const SETTLE_MS: u64 = 100;
/// How long a revocation waits for an agent that does not acknowledge it: its
/// grace after the controller's last answer (`LEASE_CONTROLLER_GRACE`, 500 ms),
/// a lease, and margin. Agents told to heartbeat less often than every 50 ms
/// have longer grace, and are waited for longer ([`revoke_timeout_ms`]).
pub const REVOKE_TIMEOUT_MS: u64 = 700;

/// How long a revocation waits for an agent that does not acknowledge it when
/// agents may be heartbeating every `longest` (the longest interval the
/// controller told any): [`REVOKE_TIMEOUT_MS`] plus what that interval adds to
/// an agent's grace ([`sluice_proto::lease_grace`]).
pub fn revoke_timeout_ms(longest: Duration) -> u64 {
    let extra =
        sluice_proto::lease_grace(longest).saturating_sub(sluice_proto::LEASE_CONTROLLER_GRACE);
    REVOKE_TIMEOUT_MS + extra.as_millis() as u64
}

/// What to push for a new desired configuration.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Push it (leases stamped where still granted).
    Apply,
    /// Do not push it yet: push these configurations instead (the current ones
    /// with some leases revoked, or the current ones unchanged while a
    /// revocation runs) and commit the desired state again once
    /// [`LeaseGate::barrier_done`].
    Hold(BTreeMap<u32, AgentConfig>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Grant {
    epoch: u64,
    sig: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Barrier {
    started_ms: u64,
    /// When every host in `need` was first seen running its version: an agent
    /// reports a version only after applying it, and may have granted a lease
    /// just before, so the lease's validity counts from here.
    acked_ms: Option<u64>,
    /// Hosts that must report at least this version (known once the held
    /// configurations were versioned).
    need: BTreeMap<u32, u64>,
    hosts: BTreeSet<u32>,
}

/// The controller's lease state.
#[derive(Debug, Clone, Default)]
pub struct LeaseGate {
    granted: BTreeMap<GroupKey, Grant>,
    /// Per eligible group: the split signature every holder was last seen
    /// running, and since when.
    converged: BTreeMap<GroupKey, (u64, u64)>,
    barrier: Option<Barrier>,
    last_epoch: u64,
    /// The longest heartbeat interval agents may be using (zero: the
    /// shortest), which the revocation timeout follows.
    longest_interval: Duration,
}

/// Groups of `state: cached` middleboxes in `cfgs`.
pub fn eligible(cfgs: &BTreeMap<u32, AgentConfig>) -> BTreeSet<GroupKey> {
    cfgs.values()
        .flat_map(|c| c.group_policies.iter())
        .filter(|p| p.cached && !p.pinned && !p.local_state)
        .map(|p| (p.vni, p.group))
        .collect()
}

/// Hosts whose configuration has group `k`.
fn holders(cfgs: &BTreeMap<u32, AgentConfig>, k: GroupKey) -> BTreeSet<u32> {
    cfgs.iter()
        .filter(|(_, c)| {
            c.tenants
                .iter()
                .any(|t| t.vni == k.0 && t.groups.iter().any(|(id, _)| *id == k.1))
        })
        .map(|(h, _)| *h)
        .collect()
}

/// A fingerprint of group `k`'s split on every host (ranges and policy, lease
/// epoch and versions aside): equal only if every agent would steer it alike.
pub fn signature(cfgs: &BTreeMap<u32, AgentConfig>, k: GroupKey) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for (host, c) in cfgs {
        let groups = c
            .tenants
            .iter()
            .filter(|t| t.vni == k.0)
            .flat_map(|t| t.groups.iter())
            .filter(|(id, _)| *id == k.1);
        for (_, g) in groups {
            host.hash(&mut h);
            serde_json::to_string(g).unwrap_or_default().hash(&mut h);
            let pol = c
                .group_policies
                .iter()
                .find(|p| (p.vni, p.group) == k)
                .map(|p| GroupPolicy {
                    lease_epoch: 0,
                    ..p.clone()
                });
            serde_json::to_string(&pol).unwrap_or_default().hash(&mut h);
        }
    }
    h.finish()
}

fn set_epoch(cfgs: &mut BTreeMap<u32, AgentConfig>, k: GroupKey, epoch: u64) {
    for c in cfgs.values_mut() {
        for p in c.group_policies.iter_mut() {
            if (p.vni, p.group) == k {
                p.lease_epoch = epoch;
            }
        }
    }
}

impl LeaseGate {
    /// The gate of a controller whose agents were last given `stored`: the
    /// leases those carry are taken as granted, so a restarted controller never
    /// changes their splits without revoking them first.
    pub fn from_configs(stored: &BTreeMap<u32, AgentConfig>) -> LeaseGate {
        let mut g = LeaseGate::default();
        for k in eligible(stored) {
            let epoch = stored
                .values()
                .flat_map(|c| c.group_policies.iter())
                .find(|p| (p.vni, p.group) == k)
                .map_or(0, |p| p.lease_epoch);
            if epoch != 0 {
                g.granted.insert(
                    k,
                    Grant {
                        epoch,
                        sig: signature(stored, k),
                    },
                );
                g.last_epoch = g.last_epoch.max(epoch);
            }
        }
        g
    }

    /// [`LeaseGate::from_configs`] for a controller starting at `now_ms`: if
    /// any group is `cached`, configurations are held (as during a revocation)
    /// until every agent holding one reported the stored version or could no
    /// longer be granting on its own. A controller that stopped in the middle of
    /// a revocation thus never pushes the new split while an agent that missed
    /// the revocation may still grant the old one.
    pub fn restarted(stored: &BTreeMap<u32, AgentConfig>, now_ms: u64) -> LeaseGate {
        let mut g = LeaseGate::from_configs(stored);
        let hosts: BTreeSet<u32> = eligible(stored)
            .into_iter()
            .flat_map(|k| holders(stored, k))
            .collect();
        if !hosts.is_empty() {
            g.barrier = Some(Barrier {
                started_ms: now_ms,
                acked_ms: None,
                need: hosts.iter().map(|h| (*h, stored[h].version)).collect(),
                hosts,
            });
        }
        g
    }

    /// Groups leased now, with their epochs.
    pub fn granted(&self) -> BTreeMap<GroupKey, u64> {
        self.granted.iter().map(|(k, g)| (*k, g.epoch)).collect()
    }

    /// True while a revocation holds configurations back.
    pub fn holding(&self) -> bool {
        self.barrier.is_some()
    }

    /// Whether the gate does nothing to a new configuration: no barrier and
    /// no lease granted (so [`LeaseGate::decide`] would neither hold nor
    /// stamp anything).
    pub fn idle(&self) -> bool {
        self.barrier.is_none() && self.granted.is_empty()
    }

    /// Decides what to push for `next` (compiled from the desired state, no
    /// lease stamped) given the configurations agents were last given
    /// (`current`). On [`Decision::Apply`], `next` has its leases stamped.
    pub fn decide(
        &mut self,
        current: &BTreeMap<u32, AgentConfig>,
        next: &mut BTreeMap<u32, AgentConfig>,
        now_ms: u64,
    ) -> Decision {
        if self.barrier.is_some() {
            return Decision::Hold(current.clone());
        }
        let still = eligible(next);
        let revoke: Vec<GroupKey> = self
            .granted
            .iter()
            .filter(|(k, g)| !still.contains(k) || signature(next, **k) != g.sig)
            .map(|(k, _)| *k)
            .collect();
        if revoke.is_empty() {
            for (k, g) in &self.granted {
                set_epoch(next, *k, g.epoch);
            }
            return Decision::Apply;
        }
        let mut interim = current.clone();
        let mut hosts = BTreeSet::new();
        for k in &revoke {
            self.granted.remove(k);
            self.converged.remove(k);
            set_epoch(&mut interim, *k, 0);
            hosts.extend(holders(current, *k));
        }
        self.barrier = Some(Barrier {
            started_ms: now_ms,
            acked_ms: None,
            need: BTreeMap::new(),
            hosts,
        });
        Decision::Hold(interim)
    }

    /// After a [`Decision::Hold`] was versioned: the versions its hosts must
    /// report.
    pub fn held_versions(&mut self, pushed: &BTreeMap<u32, AgentConfig>) {
        if let Some(b) = self.barrier.as_mut() {
            if b.need.is_empty() {
                b.need = b
                    .hosts
                    .iter()
                    .filter_map(|h| pushed.get(h).map(|c| (*h, c.version)))
                    .collect();
            }
        }
    }

    /// Records the longest heartbeat interval agents may be using now (the
    /// controller tells it them; their lease grace follows it).
    pub fn set_longest_interval(&mut self, interval: Duration) {
        self.longest_interval = interval;
    }

    /// True (once) when the revocation is over: every host it concerns reported
    /// the revoking version and the longest lease ran out since, or
    /// [`revoke_timeout_ms`] passed ([`REVOKE_TIMEOUT_MS`] while agents
    /// heartbeat every 50 ms). The caller then commits the desired state
    /// again.
    pub fn barrier_done(&mut self, now_ms: u64, reported: &BTreeMap<u32, u64>) -> bool {
        let Some(b) = self.barrier.as_mut() else {
            return false;
        };
        let acked = b
            .need
            .iter()
            .all(|(h, v)| reported.get(h).is_some_and(|r| r >= v));
        if acked && b.acked_ms.is_none() {
            b.acked_ms = Some(now_ms);
        }
        let done = b.acked_ms.is_some_and(|t| now_ms >= t + LEASE_MS)
            || now_ms >= b.started_ms + revoke_timeout_ms(self.longest_interval);
        if done {
            self.barrier = None;
        }
        done
    }

    /// Watches convergence: returns true if a group just became leasable (every
    /// host holding it has run its current split for [`SETTLE_MS`]), after
    /// recording the grant; the caller then commits the desired state again so
    /// the lease is stamped and pushed.
    pub fn observe(
        &mut self,
        current: &BTreeMap<u32, AgentConfig>,
        reported: &BTreeMap<u32, u64>,
        now_ms: u64,
    ) -> bool {
        if self.barrier.is_some() {
            return false;
        }
        let mut grant = false;
        let keys = eligible(current);
        self.converged.retain(|k, _| keys.contains(k));
        for k in keys {
            if self.granted.contains_key(&k) {
                continue;
            }
            let hs = holders(current, k);
            let running = !hs.is_empty()
                && hs.iter().all(|h| {
                    current
                        .get(h)
                        .is_some_and(|c| reported.get(h) == Some(&c.version))
                });
            if !running {
                self.converged.remove(&k);
                continue;
            }
            let sig = signature(current, k);
            let since = match self.converged.get(&k) {
                Some((s, since)) if *s == sig => *since,
                _ => now_ms,
            };
            self.converged.insert(k, (sig, since));
            if now_ms >= since + SETTLE_MS {
                // Epochs grow across restarts (milliseconds) and within one.
                self.last_epoch = (self.last_epoch + 1).max(now_ms);
                self.granted.insert(
                    k,
                    Grant {
                        epoch: self.last_epoch,
                        sig,
                    },
                );
                grant = true;
            }
        }
        grant
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_proto::TenantFib;
    use sluice_switch::{Group, HostId, Output, PortId};

    /// Hosts 1 and 2, each with one instance of group (7, 1), split by `w`.
    fn cfgs(w: (u32, u32)) -> BTreeMap<u32, AgentConfig> {
        let mut out = BTreeMap::new();
        for h in [1u32, 2] {
            let other = 3 - h;
            let targets = [
                (Output::Port(PortId(10)), if h == 1 { w.0 } else { w.1 }),
                (Output::Host(HostId(other)), if h == 1 { w.1 } else { w.0 }),
            ];
            let c = AgentConfig {
                version: 0,
                host: h,
                tenants: vec![TenantFib {
                    tenant: "t".into(),
                    vni: 7,
                    entries: vec![],
                    groups: vec![(1, Group::split(&targets).unwrap())],
                    senders: None,
                    sources: None,
                    chains: Vec::new(),
                }],
                group_policies: vec![GroupPolicy {
                    vni: 7,
                    group: 1,
                    cached: true,
                    ..GroupPolicy::default()
                }],
                ..AgentConfig::default()
            };
            out.insert(h, c);
        }
        out
    }

    fn epochs(c: &BTreeMap<u32, AgentConfig>) -> Vec<u64> {
        c.values()
            .map(|c| c.group_policies[0].lease_epoch)
            .collect()
    }

    fn versioned(old: &BTreeMap<u32, AgentConfig>, new: &mut BTreeMap<u32, AgentConfig>) {
        crate::desired::versioned(old, new);
    }

    #[test]
    fn a_group_is_leased_once_every_holder_ran_its_split_for_the_settle_time() {
        let mut gate = LeaseGate::default();
        let mut cur = cfgs((1, 1));
        versioned(&BTreeMap::new(), &mut cur);
        let mut reported: BTreeMap<u32, u64> = [(1, 1)].into();
        assert!(
            !gate.observe(&cur, &reported, 1000),
            "host 2 has not run it"
        );
        reported.insert(2, 1);
        assert!(!gate.observe(&cur, &reported, 1010));
        assert!(!gate.observe(&cur, &reported, 1010 + SETTLE_MS - 1));
        assert!(gate.observe(&cur, &reported, 1010 + SETTLE_MS));
        let epoch = gate.granted()[&(7, 1)];
        assert!(epoch >= 1010 + SETTLE_MS);
        // The desired state committed again: stamped on both hosts.
        let mut next = cfgs((1, 1));
        assert_eq!(gate.decide(&cur, &mut next, 1200), Decision::Apply);
        assert_eq!(epochs(&next), vec![epoch, epoch]);
        // Groups that are not `cached` are never leased.
        let mut plain = cfgs((1, 1));
        for c in plain.values_mut() {
            c.group_policies[0].cached = false;
        }
        let mut g2 = LeaseGate::default();
        assert!(!g2.observe(&plain, &[(1, 0), (2, 0)].into(), 0));
        assert!(!g2.observe(&plain, &[(1, 0), (2, 0)].into(), 10_000));
    }

    #[test]
    fn a_leased_split_changes_only_after_its_revocation_was_acknowledged() {
        let mut gate = LeaseGate::default();
        let mut cur = cfgs((1, 1));
        versioned(&BTreeMap::new(), &mut cur);
        let all1: BTreeMap<u32, u64> = [(1, 1), (2, 1)].into();
        gate.observe(&cur, &all1, 0);
        assert!(gate.observe(&cur, &all1, SETTLE_MS));
        let mut stamped = cfgs((1, 1));
        assert_eq!(gate.decide(&cur, &mut stamped, SETTLE_MS), Decision::Apply);
        versioned(&cur.clone(), &mut stamped);
        cur = stamped;
        let epoch = gate.granted()[&(7, 1)];
        // A scale-out changes the split: held; the current split goes out again
        // with the lease revoked.
        let mut next = cfgs((1, 3));
        let Decision::Hold(mut interim) = gate.decide(&cur, &mut next, 500) else {
            panic!("a leased split must not change at once");
        };
        assert_eq!(epochs(&interim), vec![0, 0]);
        assert_eq!(
            signature(&interim, (7, 1)),
            signature(&cur, (7, 1)),
            "old split"
        );
        versioned(&cur.clone(), &mut interim);
        gate.held_versions(&interim);
        cur = interim;
        assert!(gate.holding());
        // Anything committed meanwhile is held too.
        let mut other = cfgs((2, 3));
        assert_eq!(
            gate.decide(&cur, &mut other, 510),
            Decision::Hold(cur.clone())
        );
        // Not done before both hosts run the revocation and a lease ran out
        // after that (a lease granted just before the agent applied it).
        let v = cur[&1].version;
        assert!(!gate.barrier_done(520, &[(1, v), (2, v - 1)].into()));
        assert!(
            !gate.barrier_done(540, &[(1, v), (2, v)].into()),
            "acked now"
        );
        assert!(!gate.barrier_done(540 + LEASE_MS - 1, &[(1, v), (2, v)].into()));
        assert!(gate.barrier_done(540 + LEASE_MS, &[(1, v), (2, v)].into()));
        assert!(!gate.holding());
        // Now the new split goes out, unleased; it is leased again later with a
        // new epoch.
        let mut next = cfgs((1, 3));
        assert_eq!(gate.decide(&cur, &mut next, 600), Decision::Apply);
        assert_eq!(epochs(&next), vec![0, 0]);
        versioned(&cur.clone(), &mut next);
        cur = next;
        let rep: BTreeMap<u32, u64> = cur.iter().map(|(h, c)| (*h, c.version)).collect();
        assert!(!gate.observe(&cur, &rep, 600));
        assert!(gate.observe(&cur, &rep, 600 + SETTLE_MS));
        assert!(gate.granted()[&(7, 1)] > epoch);
    }

    /// Leases granted on a settled split, then a changed split held at
    /// 1,000 ms; what only host 1 acknowledged of the interim configuration.
    fn held_with_one_ack(gate: &mut LeaseGate) -> BTreeMap<u32, u64> {
        let mut cur = cfgs((1, 1));
        versioned(&BTreeMap::new(), &mut cur);
        let all1: BTreeMap<u32, u64> = [(1, 1), (2, 1)].into();
        gate.observe(&cur, &all1, 0);
        gate.observe(&cur, &all1, SETTLE_MS);
        let mut s = cfgs((1, 1));
        gate.decide(&cur, &mut s, SETTLE_MS);
        versioned(&cur.clone(), &mut s);
        cur = s;
        let Decision::Hold(mut interim) = gate.decide(&cur, &mut cfgs((3, 1)), 1000) else {
            panic!("held");
        };
        versioned(&cur.clone(), &mut interim);
        gate.held_versions(&interim);
        let only1: BTreeMap<u32, u64> = [(1, interim[&1].version)].into();
        only1
    }

    #[test]
    fn an_agent_that_never_acknowledges_is_waited_for_until_its_grace_ran_out() {
        let mut gate = LeaseGate::default();
        let only1 = held_with_one_ack(&mut gate);
        assert!(!gate.barrier_done(1000 + REVOKE_TIMEOUT_MS - 1, &only1));
        assert!(gate.barrier_done(1000 + REVOKE_TIMEOUT_MS, &only1));
    }

    #[test]
    fn agents_told_a_longer_heartbeat_interval_are_waited_for_longer() {
        assert_eq!(
            revoke_timeout_ms(sluice_proto::HEARTBEAT_MIN),
            REVOKE_TIMEOUT_MS
        );
        let every = Duration::from_millis(6250);
        // The agent's grace (two intervals and more), a lease, and margin.
        let wait = revoke_timeout_ms(every);
        let grace = sluice_proto::lease_grace(every).as_millis() as u64;
        assert!(wait >= grace + LEASE_MS, "{wait} ms");
        let mut gate = LeaseGate::default();
        gate.set_longest_interval(every);
        let only1 = held_with_one_ack(&mut gate);
        assert!(
            !gate.barrier_done(1000 + REVOKE_TIMEOUT_MS, &only1),
            "the agent may still be granting"
        );
        assert!(!gate.barrier_done(1000 + wait - 1, &only1));
        assert!(gate.barrier_done(1000 + wait, &only1));
    }

    #[test]
    fn a_restarted_controller_keeps_the_leases_its_agents_were_given() {
        let mut stored = cfgs((1, 1));
        for c in stored.values_mut() {
            c.group_policies[0].lease_epoch = 42;
        }
        let mut gate = LeaseGate::from_configs(&stored);
        assert_eq!(gate.granted(), [((7, 1), 42)].into());
        // Recompiled unchanged: stamped again, nothing held.
        let mut same = cfgs((1, 1));
        assert_eq!(gate.decide(&stored, &mut same, 0), Decision::Apply);
        assert_eq!(epochs(&same), vec![42, 42]);
        // Recompiled differently: revoked first.
        assert!(matches!(
            gate.decide(&stored, &mut cfgs((1, 2)), 0),
            Decision::Hold(_)
        ));
        // On a restart, nothing changes before every holder ran the stored
        // version (or its grace ran out).
        let mut gate = LeaseGate::restarted(&stored, 1000);
        assert!(gate.holding());
        assert!(matches!(
            gate.decide(&stored, &mut cfgs((1, 1)), 1000),
            Decision::Hold(_)
        ));
        assert!(!gate.barrier_done(1100, &[(1, 0)].into()));
        assert!(!gate.barrier_done(1100, &[(1, 0), (2, 0)].into()));
        assert!(gate.barrier_done(1100 + LEASE_MS, &[(1, 0), (2, 0)].into()));
        let mut same = cfgs((1, 1));
        assert_eq!(gate.decide(&stored, &mut same, 1100), Decision::Apply);
        assert_eq!(epochs(&same), vec![42, 42]);
        // Without cached groups, nothing is held.
        assert!(!LeaseGate::restarted(&BTreeMap::new(), 0).holding());
    }
}
