//! Group selection as the agent does it (not the FIB's): from its own copy of
//! each group, rewritten by instance health (failover, starting instances),
//! with pinned groups remembering each flow's first choice.

use std::collections::HashMap;

use sluice_proto::PinnedFlows;
use sluice_switch::{Output, PortId};
use sluice_wire::FlowKey;

use super::health::{Health, InstanceState};
use super::Dataplane;
use crate::groups::{Choice, GroupSel, PinKey, PinTable};

/// The groups of the configuration and the flows pinned to their targets.
#[derive(Debug)]
pub(super) struct Selection {
    /// Groups as the agent selects from them, by (vni, group id).
    pub(super) groups: HashMap<(u32, u32), GroupSel>,
    /// Entries whose output is a group selection: (vni, entry id) -> group id.
    entry_group: HashMap<(u32, u64), u32>,
    /// Pinned groups' flows.
    pins: PinTable,
}

impl Selection {
    /// `groups`, selected by the entries of `entry_group`; nothing pinned yet.
    pub(super) fn new(
        groups: HashMap<(u32, u32), GroupSel>,
        entry_group: HashMap<(u32, u64), u32>,
    ) -> Selection {
        Selection {
            groups,
            entry_group,
            pins: PinTable::new(crate::groups::PIN_CAPACITY, crate::groups::PIN_IDLE_NS),
        }
    }

    /// Takes over `old`'s pinned flows: a new split must not move them.
    pub(super) fn inherit(&mut self, old: &Selection) {
        self.pins = old.pins.clone();
    }

    /// The group FIB entry `entry` of tenant `vni` selects from, if any.
    pub(super) fn group_of(&self, vni: u32, entry: u64) -> Option<u32> {
        self.entry_group.get(&(vni, entry)).copied()
    }

    /// True if group `g` of `vni` is pinned (its choices depend on time and
    /// are not replayed).
    pub(super) fn pinned(&self, vni: u32, g: u32) -> bool {
        self.groups.get(&(vni, g)).is_some_and(|s| s.pinned)
    }

    /// True if a local-state group targets `target`.
    pub(super) fn local_state_targets(&self, target: Output) -> bool {
        self.groups
            .values()
            .any(|g| g.local_state && g.orig.ranges.iter().any(|r| r.1 == target))
    }

    /// The target of group `g` of `vni` for `flow` (None: no live one).
    pub(super) fn select(
        &mut self,
        vni: u32,
        g: u32,
        from_fabric: bool,
        flow: FlowKey,
        now_ns: u64,
    ) -> Option<Output> {
        let sel = self.groups.get(&(vni, g))?;
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
        if let Some(o) = self.pins.get(&key, now_ns) {
            if sel.may_keep(o, from_fabric) {
                return Some(o);
            }
        }
        match sel.choose(hash, from_fabric) {
            Choice::Out(o) => {
                self.pins.insert(key, o, now_ns);
                Some(o)
            }
            Choice::NoLive => None,
        }
    }

    /// Recomputes every group's effective targets from `health`; returns the
    /// number of groups that differ from the controller's.
    fn refresh(&mut self, health: &Health) -> u32 {
        let dead = health.ports_where(|h: &InstanceState| h.suspected);
        // Local-state groups fail over only what has exited (see GroupSel).
        let exited = health.ports_where(|h: &InstanceState| h.exited);
        // Instances never heard from may still be starting: new flows avoid them
        // while a ready instance can take them (a scale-out loses nothing to a
        // process that is not listening yet).
        let starting = health.ports_where(InstanceState::starting);
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

    /// Live pinned flows per target of every pinned group (draining targets
    /// listed even with no flow left).
    fn pinned_flows(&self, now_ns: u64) -> Vec<PinnedFlows> {
        let counts = self.pins.counts(now_ns);
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
}

impl Dataplane {
    /// Recomputes every group's effective targets from the instances' health;
    /// returns the number of groups that differ from the controller's.
    pub(super) fn refresh_groups(&mut self) -> u32 {
        self.groups.refresh(&self.health)
    }

    /// Live pinned flows per target of every pinned group (draining targets
    /// listed even with no flow left, so a drain can be awaited).
    pub fn pinned_flows(&self) -> Vec<PinnedFlows> {
        self.groups.pinned_flows(self.now_ns)
    }
}
