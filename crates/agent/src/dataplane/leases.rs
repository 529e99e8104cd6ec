//! Lease gating: which hash ranges a local NF instance may own outright (and
//! serve from its own state), granted in answer to its heartbeats once the
//! conditions have held long enough, and revoked when they stop holding.

use std::net::SocketAddrV4;

use sluice_switch::{Output, PortId};

use super::plan::{Dest, Out, TxPlan};
use super::stats::CounterId;
use super::Dataplane;

/// Longest validity of a lease granted to a local instance. It must end before
/// the instance can be suspected (see [`Dataplane::set_suspect_after`]); with
/// heartbeats every 10 ms, one lost heartbeat does not interrupt it.
pub const LEASE_VALID_NS: u64 = 20_000_000;
/// How long a lease's conditions must have held before it is granted: packets
/// of the ranges steered elsewhere before (a failover, a starting instance)
/// have been processed by then.
pub const LEASE_DRAIN_NS: u64 = 50_000_000;

/// A lease an instance could hold: (epoch, ranges, since when the conditions
/// have held on the data-plane clock).
type LeaseCandidate = (u64, Vec<(u32, u32)>, u64);

/// When the agent may grant leases, and for how long.
#[derive(Debug, Clone, Copy)]
pub(super) struct Leases {
    /// Leases may be granted until then (data-plane clock): the control loop
    /// extends it while the controller answers, so an agent cut off from the
    /// controller stops granting and the controller may change splits without it.
    allowed_until_ns: u64,
    /// Validity of a lease granted now.
    pub(super) valid_ns: u64,
}

impl Default for Leases {
    fn default() -> Leases {
        Leases {
            allowed_until_ns: 0,
            valid_ns: LEASE_VALID_NS,
        }
    }
}

/// One instance's lease, as the data plane tracks it.
#[derive(Debug, Clone, Default)]
pub(super) struct LeaseState {
    /// The lease it could hold and since when that has been so.
    candidate: Option<LeaseCandidate>,
    /// A lease was sent and not revoked since.
    granted: bool,
}

impl LeaseState {
    /// The instance's ranges go elsewhere now (it was suspected or exited):
    /// a lease needs a new drain.
    pub(super) fn restart_drain(&mut self) {
        self.candidate = None;
    }
}

impl Dataplane {
    /// Lets the agent grant leases until `until_ns` (data-plane clock); the
    /// control loop extends it each time the controller answers.
    pub fn allow_leases_until(&mut self, until_ns: u64) {
        self.leases.allowed_until_ns = until_ns;
    }

    /// The lease the instance on `port` may hold now: the controller marked
    /// every group targeting it leased, and every one of them sends it exactly
    /// the same hash ranges by hash alone (see [`crate::groups::GroupSel::owned_ranges`]).
    fn lease_candidate(&self, port: u16) -> Option<(u64, Vec<(u32, u32)>)> {
        if self.now_ns >= self.leases.allowed_until_ns || self.leases.valid_ns == 0 {
            return None;
        }
        let h = self.health.instances.get(&port)?;
        if h.suspected || h.exited {
            return None;
        }
        let target = Output::Port(PortId(port));
        let mut out: Option<(u64, Vec<(u32, u32)>)> = None;
        for g in self.groups.groups.values() {
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
    pub(super) fn answer_lease(
        &mut self,
        port: u16,
        seq: u32,
        to: SocketAddrV4,
        plan: &mut TxPlan,
    ) {
        let cand = self.lease_candidate(port);
        let now = self.now_ns;
        let valid_us = (self.leases.valid_ns / 1000) as u32;
        let Some(h) = self.health.instances.get_mut(&port) else {
            return;
        };
        let l = &mut h.lease;
        let msg = match cand {
            Some((epoch, ranges)) => {
                let since = match &l.candidate {
                    Some((e, r, since)) if *e == epoch && *r == ranges => *since,
                    _ => now,
                };
                l.candidate = Some((epoch, ranges.clone(), since));
                if now >= since.saturating_add(LEASE_DRAIN_NS) {
                    l.granted = true;
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
                l.candidate = None;
                None
            }
        };
        let msg = match msg {
            Some(m) => m,
            None if l.granted => {
                l.granted = false;
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
}
