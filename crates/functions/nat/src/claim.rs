//! The NAT's round trips after the first decisions: pool items for new flows,
//! the recheck of records that looked expired, the claim of new mappings and,
//! after a lost race, adopting the winner's.

use sluice_nf::batch::Pass;
use sluice_nf::{Batch, Ctx, NfError};
use sluice_state::{Key, OpId, StateStore};
use sluice_wire::IpAddr;

use crate::decide::{Dir, Plan};
use crate::mapping::{rev_flow, Mapping};
use crate::reserve::Block;
use crate::{Nat, RESERVE_TTL_NS, TABLE_RESV, TABLE_REV};

impl Nat {
    /// The slot of packet `i` if it is translated.
    fn planned(pass: &Pass<Nat>, i: u32) -> Option<(u32, crate::decide::Dir)> {
        match pass.plans[i as usize] {
            Some(Plan::Do { slot, dir }) => Some((slot, dir)),
            _ => None,
        }
    }

    /// Queues, for the second round trip, a pool item for every new flow
    /// (from the reserve when it has one), the reserve's used counts and, when
    /// the reserve ran short, its refill.
    pub(crate) fn allocate(&mut self, pass: &mut Pass<Nat>, now: u64) {
        let mut short = false;
        self.refill = None;
        // In packet order, as one packet at a time would allocate: new flows,
        // and flows whose mapping may have expired (an item taken for nothing
        // goes back after the recheck).
        // The candidates are the packets decide queued (new flows, replies) and
        // those it put up for a recheck, each list in packet order: merged,
        // not a walk over every packet of the batch.
        let (mut a, mut b) = (0, 0);
        while a < self.pending.len() || b < self.recheck.len() {
            let i = match (self.pending.get(a), self.recheck.get(b)) {
                (Some(&x), Some(&y)) if x == y => {
                    a += 1;
                    b += 1;
                    x
                }
                (Some(&x), Some(&y)) if x < y => {
                    a += 1;
                    x
                }
                (Some(&x), None) => {
                    a += 1;
                    x
                }
                (_, Some(&y)) => {
                    b += 1;
                    y
                }
                (None, None) => break,
            };
            // Replies wait for mappings; only outbound packets open them.
            let Some((slot, Dir::Out)) = Self::planned(pass, i) else {
                continue;
            };
            let x = &pass.recs[slot].x;
            let wants = (pass.recs[slot].cur.is_none() && x.born.is_some()) || x.maybe_expired;
            if !wants || x.alloc.is_some() || x.pre.is_some() {
                continue;
            }
            let pre = self.take_reserved(now, &mut pass.ops);
            let x = &mut pass.recs[slot].x;
            x.pre = pre;
            if pre.is_none() {
                x.alloc = Some(pass.ops.pool_alloc(self.pool_key));
                short = true;
            }
        }
        self.mark_used(&mut pass.ops);
        if short && self.reserve_n > 0 {
            // Taken ahead in the round trip that waits anyway.
            self.refill = Some(pass.ops.pool_take(self.pool_key, self.reserve_n as u32));
        }
    }

    /// Decides the packets whose own record looked expired with the other
    /// direction's record (read in the second round trip), and queues the
    /// writes of their records on `ops2`.
    pub(crate) fn recheck(&mut self, batch: &mut Batch, ctx: &Ctx<'_>, pass: &mut Pass<Nat>) {
        for k in 0..self.recheck.len() {
            let i = self.recheck[k];
            let Some((slot, dir)) = Self::planned(pass, i) else {
                continue;
            };
            let s = &pass.recs[slot];
            let proto = s.x.flow.proto;
            let other = match s.x.other.map(|g| pass.ops.decode::<Mapping>(g)) {
                Some(Ok(v)) => v,
                _ => None,
            };
            let p = &mut batch.pkts[i as usize];
            let now = p.ts_ns;
            let merged = s.cur.and_then(|c| Self::merged(&c, other.as_ref()));
            let Some(m) = merged.filter(|m| other.is_some() && self.alive(proto, m, now)) else {
                if dir == Dir::Out {
                    // Expired: a new mapping (its item taken ahead), as after
                    // its timer.
                    let s = &mut pass.recs[slot];
                    if let (None, Some(c)) = (self.expired_of(&s.x), s.cur) {
                        self.side_mut(&mut s.x).expired = Some((c, other));
                        s.x.born = Some(now);
                        s.cur = None;
                        s.dirty = false;
                    }
                    self.pending.push(i);
                    continue;
                }
                self.c.no_mapping += 1;
                p.drop_by(ctx.stage, "no_mapping");
                continue;
            };
            let s = &mut pass.recs[slot];
            if s.x.maybe_expired {
                // Alive after all: the item taken ahead goes back.
                s.x.maybe_expired = false;
                let item = match (s.x.pre.take(), s.x.alloc.take()) {
                    (Some(item), _) => Some(item),
                    (None, Some(a)) => pass.ops.allocated(a).and_then(|x| u32::try_from(x).ok()),
                    _ => None,
                };
                if let Some(item) = item {
                    self.ops2.pool_free(self.pool_key, item as u64);
                }
            }
            let mp = self.touch(&mut pass.recs[slot], dir, m, &p.meta, now);
            self.apply(p, dir, &mp, ctx.stage);
        }
        let mut ops2 = std::mem::take(&mut self.ops2);
        for s in pass.recs.iter() {
            if s.dirty && s.x.other.is_some() {
                self.queue_write(&mut ops2, s);
            }
        }
        self.ops2 = ops2;
    }

    /// Records the reserve's new block in the store (its unused items freed
    /// by its timer if this instance dies before using them), on `ops2`.
    pub(crate) fn record_refill(&mut self, pass: &Pass<Nat>, now: u64) {
        let Some(t) = self.refill else { return };
        self.scratch.clear();
        let mut items = Vec::with_capacity(self.reserve_n);
        for item in pass.ops.taken(t).filter_map(|x| u32::try_from(x).ok()) {
            self.scratch.extend_from_slice(&item.to_be_bytes());
            items.push(item);
        }
        if let Some(&first) = items.first() {
            let key = Key::new(self.ns, TABLE_RESV, &first.to_be_bytes());
            self.ops2.put(key, &self.scratch);
            self.ops2.arm_timer(key, now.saturating_add(RESERVE_TTL_NS));
            self.reserve.push_back(Block {
                key,
                items,
                used: 0,
                marked: 0,
                at: now,
            });
        }
    }

    /// Queues on `ops2` the new mappings: the reverse record first, then the
    /// forward one claimed only if still absent.
    pub(crate) fn claim(&mut self, pass: &mut Pass<Nat>, batch_now: u64) {
        for s in pass.recs.iter_mut() {
            // The mapping's time is its first packet's, not the batch's.
            let now = s.x.born.unwrap_or(batch_now);
            let allocated = |a: OpId| pass.ops.allocated(a).and_then(|x| u32::try_from(x).ok());
            let item = match (s.x.pre, s.x.alloc) {
                (Some(item), _) => item,
                (None, Some(a)) => match allocated(a) {
                    Some(item) => item,
                    None => continue,
                },
                (None, None) => continue,
            };
            let (pa, pp) = self.public_of(item);
            let (IpAddr::V4(ia), ip) = (s.x.flow.src, s.x.flow.src_port) else {
                continue;
            };
            let m = Mapping {
                flags: 0,
                item,
                inside_addr: ia,
                inside_port: ip,
                last_seen_ns: now,
            };
            let rf = rev_flow(&s.x.flow, pa, pp);
            let rk = Key::flow(self.ns, TABLE_REV, &rf, &[]);
            // Cached here only if this instance also owns the reply flow.
            self.ops2.put_value_owned(rk, &m, rf.symmetric_hash());
            // Replacing an expired mapping only if it is still what was read.
            let was = self.expired_of(&s.x).map(|e| e.0);
            let cas = match s.x.hash {
                Some(h) => self
                    .ops2
                    .compare_and_set_owned(s.key, was.as_ref(), Some(&m), h),
                None => self.ops2.compare_and_set(s.key, was.as_ref(), Some(&m)),
            };
            self.ops2
                .arm_timer(s.key, now.saturating_add(self.timeout(s.x.flow.proto, 0)));
            s.x.item = Some(item);
            s.x.cas = Some(cas);
            self.side_mut(&mut s.x).made = Some(m);
            s.cur = Some(m);
        }
    }

    /// After a lost race: returns our item, removes our reverse record and
    /// reads the winner's mapping (one more round trip, only then).
    pub(crate) fn settle_races(
        &mut self,
        pass: &mut Pass<Nat>,
        store: &mut dyn StateStore,
    ) -> Result<(), NfError> {
        pass.ops.clear();
        for s in pass.recs.iter_mut() {
            let (Some(cas), Some(item)) = (s.x.cas, s.x.item) else {
                continue;
            };
            if self.ops2.swapped(cas) {
                self.c.new_mappings += 1;
                if let Some((old, old_rev)) = self.expired_of(&s.x) {
                    // What the expired mapping's timer would have removed.
                    let (pa, pp) = self.public_of(old.item);
                    let rk = Key::flow(self.ns, TABLE_REV, &rev_flow(&s.x.flow, pa, pp), &[]);
                    if let Some(r) = old_rev {
                        pass.ops.compare_and_set(rk, Some(&r), None);
                    }
                    pass.ops.pool_free(self.pool_key, old.item as u64);
                    self.c.expired += 1;
                }
                continue;
            }
            self.c.races_lost += 1;
            if let Some(side) = self.sides.get_mut(s.x.side as usize) {
                side.made = None;
            }
            let (pa, pp) = self.public_of(item);
            let rk = Key::flow(self.ns, TABLE_REV, &rev_flow(&s.x.flow, pa, pp), &[]);
            pass.ops.delete(rk);
            pass.ops.pool_free(self.pool_key, item as u64);
            s.x.reread = Some(pass.ops.get(s.key));
            s.cur = None;
        }
        if !pass.ops.is_empty() {
            store.execute(&mut pass.ops)?;
            for s in pass.recs.iter_mut() {
                if let Some(g) = s.x.reread {
                    s.cur = pass.ops.decode::<Mapping>(g).ok().flatten();
                }
            }
        }
        Ok(())
    }

    /// Translates the packets that waited for the batch's new mappings, in
    /// order, as each would have been had it come in a batch of its own after
    /// the claim: the opening packet as claimed, later outbound packets
    /// touching the forward record, replies finding the reverse record the
    /// claim wrote. Returns whether they changed records (written by
    /// [`Nat::write_late`]).
    pub(crate) fn finish_pending(
        &mut self,
        batch: &mut Batch,
        ctx: &Ctx<'_>,
        pass: &mut Pass<Nat>,
    ) -> bool {
        // In packet order (rechecked packets joined the list late).
        self.pending.sort_unstable();
        let mut late = false;
        for k in 0..self.pending.len() {
            let i = self.pending[k];
            let Some((slot, dir)) = Self::planned(pass, i) else {
                continue;
            };
            let p = &mut batch.pkts[i as usize];
            let now = p.ts_ns;
            if matches!(dir, Dir::In | Dir::InErr) && pass.recs[slot].cur.is_none() {
                if let Some(m) = self.claimed_for(pass, slot) {
                    let s = &mut pass.recs[slot];
                    s.old = Some(m);
                    s.cur = Some(m);
                }
            }
            let s = &mut pass.recs[slot];
            let Some(cur) = s.cur else {
                if s.x.alloc.is_some() && s.x.item.is_none() {
                    self.c.pool_exhausted += 1;
                    p.drop_by(ctx.stage, "pool_exhausted");
                } else {
                    self.c.no_mapping += 1;
                    p.drop_by(ctx.stage, "no_mapping");
                }
                continue;
            };
            // The packet that opened the mapping is what the claim wrote.
            let made = self.made_of(&s.x);
            if dir == Dir::Out && made.is_some() && s.x.born == Some(now) && !s.x.late {
                s.x.born = None;
                self.apply(p, dir, &cur, ctx.stage);
                continue;
            }
            if dir == Dir::In && !self.alive_alone(s.x.flow.proto, &cur, now) {
                // Only the forward record, written this batch, could keep it.
                self.c.no_mapping += 1;
                p.drop_by(ctx.stage, "no_mapping");
                continue;
            }
            // Written by the claim: later changes compare against that.
            if made.is_some() {
                s.old = made;
            }
            let mp = self.touch(s, dir, cur, &p.meta, now);
            if s.cur != Some(cur) {
                s.x.late = true;
                late = true;
            }
            self.apply(p, dir, &mp, ctx.stage);
        }
        late
    }

    /// The mapping a forward record claimed this batch whose reverse record is
    /// record `slot` (a reply flow), if any.
    fn claimed_for(&self, pass: &Pass<Nat>, slot: u32) -> Option<Mapping> {
        let want = pass.recs[slot].x.flow;
        pass.recs.iter().find_map(|f| {
            let m = self.made_of(&f.x).filter(|_| f.x.fwd)?;
            let (pa, pp) = self.public_of(m.item);
            (rev_flow(&f.x.flow, pa, pp) == want).then_some(m)
        })
    }

    /// Writes the records that waited packets changed (one more round trip,
    /// only then).
    pub(crate) fn write_late(
        &mut self,
        pass: &mut Pass<Nat>,
        store: &mut dyn StateStore,
    ) -> Result<(), NfError> {
        let mut ops = std::mem::take(&mut self.ops2);
        ops.clear();
        for s in pass.recs.iter().filter(|s| s.x.late) {
            self.queue_write(&mut ops, s);
        }
        let r = if ops.is_empty() {
            Ok(())
        } else {
            store.execute(&mut ops)
        };
        self.ops2 = ops;
        r.map_err(NfError::from)
    }
}
