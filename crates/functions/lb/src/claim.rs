//! The load balancer's round trips after the first decisions: the rare
//! second reads, loads for least-connections, the claim of new connections
//! and, after a lost race, adopting the winner's record.

use sluice_nf::batch::Pass;
use sluice_nf::{Batch, Ctx, NfError};
use sluice_state::{Ops, StateStore};
use sluice_wire::parse::L4;
use sluice_wire::tcp::flags::{ACK, FIN, RST, SYN};

use crate::config::Algorithm;
use crate::conn::{ret_parts, Conn, FIN_CLIENT, FIN_SERVER, RST_SEEN};
use crate::decide::Plan;
use crate::{Lb, TABLE_CONN};
use sluice_state::Key;

impl Lb {
    /// Only when a record alone cannot decide (rare): the client direction
    /// reads the reply direction's record (closing flags, a SYN, a record that
    /// looks expired), the reply direction re-reads a cached client record that
    /// names another backend. One round trip, only if any.
    pub(crate) fn second_reads(
        &mut self,
        batch: &Batch,
        pass: &mut Pass<Lb>,
        store: &mut dyn StateStore,
    ) -> Result<(), NfError> {
        self.ops2.clear();
        let first_late = self.rets.len();
        for (i, p) in batch.pkts.iter().enumerate() {
            match pass.plans[i] {
                Some(Plan::In { slot }) => {
                    let s = &pass.recs[slot];
                    let Some(c) = s.cur else { continue };
                    let syn = p.meta.l4 == L4::Tcp && p.meta.tcp_flags & (SYN | ACK | RST) == SYN;
                    if s.x.ret.is_none() && (c.flags != 0 || syn || !self.alive_alone(&c, p.ts_ns))
                    {
                        let canon = s.x.canon;
                        // Read as its owner would: if this instance also holds the
                        // replies' hash range, its cache has the record (or knows
                        // there is none) and the read costs no round trip.
                        let h = self.reply_hash(&canon, &c);
                        let key = self.ret_key(&canon, c.backend);
                        let r = Self::ret_for(&mut self.rets, &mut self.ops2, key, h);
                        pass.recs[slot].x.ret = Some(r);
                    }
                }
                Some(Plan::Out { slot, backend, .. }) => {
                    let s = &mut pass.recs[slot];
                    if s.x.own.is_none()
                        && s.x.fresh.is_none()
                        && s.cur.is_some_and(|c| c.backend != backend)
                    {
                        s.x.fresh = Some(self.ops2.get(s.key));
                    }
                }
                _ => {}
            }
        }
        if !self.ops2.is_empty() {
            store.execute(&mut self.ops2)?;
            for s in pass.recs.iter_mut() {
                if let Some(g) = s.x.fresh {
                    s.load(self.ops2.decode::<Conn>(g).ok().flatten());
                }
            }
            self.rets
                .load_with(&self.ops2, first_late, |r, v| r.load(v.ok().flatten()));
        }
        Ok(())
    }

    /// Queues the writes of changed reply records.
    pub(crate) fn queue_ret_writes(&self, ops: &mut Ops) {
        for e in self.rets.iter() {
            let (true, Some(cur)) = (e.dirty, e.cur) else {
                continue;
            };
            let proto = self.services[cur.service as usize].proto;
            let half = self.min_timeout(proto) / 2;
            if e.old.is_none() {
                // Created here: its own timer removes it once it is idle and its
                // connection is gone or idle too.
                match e.x.hash {
                    Some(h) => ops.compare_and_set_owned(e.key, None, Some(&cur), h),
                    None => ops.compare_and_set(e.key, None, Some(&cur)),
                };
                ops.arm_timer(e.key, self.deadline(&cur));
            } else {
                Self::queue_write(ops, e.key, e.old, cur, e.x.hash, e.x.through, half);
            }
            if let (Some(d), Some((k, _))) = (e.x.rearm, ret_parts(&e.key)) {
                ops.arm_timer(Key::flow(self.ns, TABLE_CONN, &k, &[]), d);
            }
        }
    }

    /// Loads of least-connections services with new connections: counters read
    /// with a zero increment (atomic, never read-modify-write), in the round
    /// trip of the writes queued so far.
    pub(crate) fn read_loads(
        &mut self,
        pass: &mut Pass<Lb>,
        store: &mut dyn StateStore,
    ) -> Result<(), NfError> {
        let ops = &mut pass.ops;
        self.loads.resize_with(self.services.len(), Vec::new);
        for (si, svc) in self.services.iter().enumerate() {
            self.loads[si].clear();
            let wanted = svc.algorithm == Algorithm::LeastConnections
                && pass
                    .recs
                    .iter()
                    .any(|s| s.x.new && s.x.service as usize == si);
            for b in &svc.backends {
                let id = wanted.then(|| ops.incr(b.load_key, 0));
                self.loads[si].push((id, 0));
            }
        }
        store.execute(ops)?;
        for l in self.loads.iter_mut() {
            for e in l.iter_mut() {
                if let Some(id) = e.0 {
                    e.1 = ops.counter(id);
                }
            }
        }
        ops.clear();
        Ok(())
    }

    /// Claims new connections: the record (compare-and-set against what was
    /// read), the chosen backend's load, the old backend's if replacing an
    /// expired record.
    pub(crate) fn claim(&mut self, batch: &mut Batch, pass: &mut Pass<Lb>, stage: u8) {
        self.fold_pending(batch, pass, stage);
        let ops = &mut pass.ops;
        for s in pass.recs.iter_mut() {
            if !s.x.new {
                continue;
            }
            let Some(b) = self.choose(s.x.service, s.x.hash) else {
                continue;
            };
            // The connection's time is its first packet's, not the batch's;
            // its later client packets in the batch count as they would in
            // batches of their own.
            let (flags, last_seen_ns) = s.x.folded.unwrap_or((0, s.x.born));
            let c = Conn {
                flags,
                service: s.x.service,
                backend: b,
                last_seen_ns,
            };
            let svc = &self.services[s.x.service as usize];
            let cas = match s.x.own {
                Some(h) => ops.compare_and_set_owned(s.key, s.old.as_ref(), Some(&c), h),
                None => ops.compare_and_set(s.key, s.old.as_ref(), Some(&c)),
            };
            // Loads are only adjusted here, never read back: a pipelined cache
            // may send them without waiting.
            ops.incr_no_reply(svc.backends[b as usize].load_key, 1);
            if let Some(o) = s.old {
                if let Some(ob) = self.load_key(o.service as usize, o.backend as usize) {
                    ops.incr_no_reply(ob, -1);
                }
            }
            ops.arm_timer(s.key, self.deadline(&c));
            s.x.cas = Some(cas);
            s.cur = Some(c);
        }
    }

    /// Goes through the packets that wait for new connections' claims in
    /// order, as each would be decided in a batch of its own after the claim:
    /// the first client packet opens the connection (flags clear, its time);
    /// later ones set FIN or RST and refresh `last_seen` as packets of an
    /// existing connection do, or, finding it idle past its timeout (with its
    /// replies so far), are dropped (TCP) or open it afresh; replies finding it
    /// idle are dropped. What is left is written by the claim.
    fn fold_pending(&mut self, batch: &mut Batch, pass: &mut Pass<Lb>, stage: u8) {
        // Per connection record: its replies' record as folded so far.
        let mut replies = std::mem::take(&mut self.fold_replies);
        replies.clear();
        for k in 0..self.pending.len() {
            let i = self.pending[k] as usize;
            let (slot, reply) = match pass.plans[i] {
                Some(Plan::In { slot }) => (slot, None),
                Some(Plan::Out { slot, backend, ret }) => (slot, Some((backend, ret))),
                _ => continue,
            };
            let s = &mut pass.recs[slot];
            if !s.x.new {
                continue;
            }
            let p = &mut batch.pkts[i];
            let (now, m) = (p.ts_ns, p.meta);
            let tcp = m.l4 == L4::Tcp;
            let Some((flags, last)) = s.x.folded else {
                if reply.is_none() {
                    s.x.folded = Some((0, now));
                }
                continue;
            };
            let c = Conn {
                flags,
                service: s.x.service,
                backend: 0,
                last_seen_ns: last,
            };
            let r = replies.iter().find(|e| e.0 == slot).map(|e| e.1);
            let view = r.map_or(c, |r| Conn {
                flags: c.flags | r.flags,
                last_seen_ns: c.last_seen_ns.max(r.last_seen_ns),
                ..c
            });
            let alive = |x: &Conn| {
                let t = self.timeout(self.services[x.service as usize].proto, x);
                now < x.last_seen_ns.saturating_add(t)
            };
            match reply {
                Some((backend, ret)) => {
                    if !alive(&view) {
                        self.c.no_state += 1;
                        p.drop_by(stage, "no_state");
                        continue;
                    }
                    let base = r.or_else(|| {
                        self.rets[ret]
                            .cur
                            .filter(|x| x.backend == backend && x.service == c.service)
                    });
                    let mut n = base.unwrap_or(Conn {
                        flags: 0,
                        last_seen_ns: 0,
                        ..c
                    });
                    if tcp {
                        if m.tcp_flags & SYN != 0 {
                            n.flags = 0;
                        }
                        if m.tcp_flags & RST != 0 {
                            n.flags |= RST_SEEN;
                        }
                        if m.tcp_flags & FIN != 0 {
                            n.flags |= FIN_SERVER;
                        }
                    }
                    if base.map(|b| b.flags) != Some(n.flags)
                        || now.saturating_sub(n.last_seen_ns) >= self.refresh_ns
                    {
                        n.last_seen_ns = n.last_seen_ns.max(now);
                    }
                    match replies.iter_mut().find(|e| e.0 == slot) {
                        Some(e) => e.1 = n,
                        None => replies.push((slot, n)),
                    }
                }
                None => {
                    let syn = tcp && m.tcp_flags & (SYN | ACK | RST) == SYN;
                    let usable = alive(&view) && !(syn && view.closing());
                    if !usable {
                        if tcp && !syn {
                            self.c.no_state += 1;
                            p.drop_by(stage, "no_state");
                        } else {
                            // A new connection on the same tuple.
                            s.x.folded = Some((0, now));
                        }
                        continue;
                    }
                    let mut f = flags;
                    if tcp {
                        if m.tcp_flags & RST != 0 {
                            f |= RST_SEEN;
                        }
                        if m.tcp_flags & FIN != 0 {
                            f |= FIN_CLIENT;
                        }
                    }
                    let last = if f != flags || now.saturating_sub(last) >= self.refresh_ns {
                        now.max(last)
                    } else {
                        last
                    };
                    s.x.folded = Some((f, last));
                }
            }
        }
        self.fold_replies = replies;
    }

    /// Replies in the batch that opened their connection (a SYN-ACK behind its
    /// SYN) waited for the claim; their own record is created in the claim's
    /// round trip, as the first reply of a known connection creates it, so the
    /// connection's next replies (established traffic) find it instead of
    /// creating it then.
    pub(crate) fn create_replies(&mut self, batch: &Batch, pass: &mut Pass<Lb>) {
        let mut created = false;
        for k in 0..self.pending.len() {
            let i = self.pending[k] as usize;
            let Some(Plan::Out { slot, backend, ret }) = pass.plans[i] else {
                continue;
            };
            if !batch.pkts[i].is_live() {
                continue;
            }
            let Some(c) = pass.recs[slot].cur else {
                continue;
            };
            let e = &mut self.rets[ret];
            if e.x.hash.is_none() {
                continue;
            }
            if !e.x.with_claim {
                // Written below against what the store holds at the end of
                // this batch's other writes.
                e.x.was_dirty = e.dirty;
            }
            let m = &batch.pkts[i].meta;
            let base = e.cur.filter(|x| x.service == c.service);
            let old_flags = base.map(|x| x.flags);
            let mut n = base.unwrap_or(Conn {
                flags: 0,
                service: c.service,
                backend,
                last_seen_ns: 0,
            });
            if m.l4 == L4::Tcp {
                if m.tcp_flags & SYN != 0 {
                    n.flags = 0;
                }
                if m.tcp_flags & RST != 0 {
                    n.flags |= RST_SEEN;
                }
                if m.tcp_flags & FIN != 0 {
                    n.flags |= FIN_SERVER;
                }
            }
            // Refreshed as a reply of an existing connection refreshes it.
            let now = batch.pkts[i].ts_ns;
            if old_flags != Some(n.flags) || now.saturating_sub(n.last_seen_ns) >= self.refresh_ns {
                n.last_seen_ns = n.last_seen_ns.max(now);
            }
            e.cur = Some(n);
            e.dirty = true;
            e.x.with_claim = true;
            created = true;
        }
        if created {
            for e in self.rets.iter().filter(|e| e.x.with_claim) {
                let (Some(cur), Some(h)) = (e.cur, e.x.hash) else {
                    continue;
                };
                match e.old {
                    None if !e.x.was_dirty => {
                        pass.ops.compare_and_set_owned(e.key, None, Some(&cur), h);
                    }
                    // Already written this batch: this value follows it.
                    _ if e.x.was_dirty => {
                        pass.ops.put_value_owned(e.key, &cur, h);
                    }
                    old => {
                        let half = self.min_timeout(self.services[cur.service as usize].proto) / 2;
                        let through = old.map(|o| o.flags) != Some(cur.flags);
                        Self::queue_write(&mut pass.ops, e.key, old, cur, Some(h), through, half);
                    }
                }
                pass.ops.arm_timer(e.key, self.deadline(&cur));
            }
        }
    }

    /// After a lost race: undoes our load changes and adopts the winner's
    /// record (one more round trip, only then).
    pub(crate) fn settle_races(
        &mut self,
        pass: &mut Pass<Lb>,
        store: &mut dyn StateStore,
    ) -> Result<(), NfError> {
        self.ops2.clear();
        for s in pass.recs.iter_mut() {
            let (Some(cas), Some(c)) = (s.x.cas, s.cur) else {
                continue;
            };
            if pass.ops.swapped(cas) {
                self.c.new_connections += 1;
                continue;
            }
            self.c.races_lost += 1;
            let svc = &self.services[c.service as usize];
            self.ops2
                .incr(svc.backends[c.backend as usize].load_key, -1);
            if let Some(o) = s.old {
                if let Some(ob) = self.load_key(o.service as usize, o.backend as usize) {
                    self.ops2.incr(ob, 1);
                }
            }
            s.x.reread = Some(self.ops2.get(s.key));
            s.cur = None;
        }
        if !self.ops2.is_empty() {
            store.execute(&mut self.ops2)?;
            for s in pass.recs.iter_mut() {
                if let Some(g) = s.x.reread {
                    let v = self.ops2.decode::<Conn>(g).ok().flatten();
                    // Judged at the time of the packet that tried to open it.
                    s.cur = v.filter(|c| self.alive(c, s.x.born));
                }
            }
        }
        Ok(())
    }

    /// Rewrites the packets that waited for their connection's claim, or drops
    /// them.
    pub(crate) fn finish_pending(&mut self, batch: &mut Batch, ctx: &Ctx<'_>, pass: &Pass<Lb>) {
        for k in 0..self.pending.len() {
            let i = self.pending[k] as usize;
            let Some(plan) = pass.plans[i] else { continue };
            let slot = match plan {
                Plan::In { slot } | Plan::Out { slot, .. } => slot,
                Plan::Skip => continue,
            };
            let s = &pass.recs[slot];
            let p = &mut batch.pkts[i];
            if !p.is_live() {
                continue;
            }
            match s.cur {
                Some(c) => {
                    let (frame, meta) = p.data_and_meta_mut();
                    if let Err(r) = self.rewrite(frame, meta, plan, &c) {
                        p.drop_by(ctx.stage, r);
                    }
                }
                None if s.x.cas.is_none() => {
                    self.c.no_backend += 1;
                    p.drop_by(ctx.stage, "no_backend");
                }
                None => {
                    self.c.no_state += 1;
                    p.drop_by(ctx.stage, "no_state");
                }
            }
        }
    }

    /// Picks a backend for a new connection of service `service` whose client
    /// flow hashes to `hash`, `None` if none is eligible.
    fn choose(&mut self, service: u16, hash: u32) -> Option<u16> {
        let svc = service as usize;
        let s = &self.services[svc];
        match s.algorithm {
            Algorithm::Maglev => {
                let b = *s.table.get(hash as usize % s.table.len().max(1))?;
                (b != u16::MAX).then_some(b)
            }
            Algorithm::LeastConnections => {
                let loads = &mut self.loads[svc];
                let mut best: Option<(usize, i64, u64)> = None;
                for (i, b) in s.backends.iter().enumerate() {
                    if !b.eligible() {
                        continue;
                    }
                    let l = loads[i].1.max(0);
                    let w = b.weight as u64;
                    // Compare load/weight as cross products to stay in integers.
                    let better = match best {
                        None => true,
                        Some((_, bl, bw)) => {
                            (l as u128) * (bw as u128) < (bl as u128) * (w as u128)
                        }
                    };
                    if better {
                        best = Some((i, l, w));
                    }
                }
                let (i, _, _) = best?;
                loads[i].1 += 1;
                Some(i as u16)
            }
        }
    }
}
