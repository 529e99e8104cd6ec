//! The load balancer's per-packet decisions on the shared batch skeleton
//! ([`sluice_nf::batch`]): the records a packet needs, its verdict and
//! rewrite over both directions' records, the writes of changed records.

use rustc_hash::FxBuildHasher;
use sluice_nf::batch::{BatchNf, Pass, Read, Record, Records};
use sluice_nf::{Ctx, Packet};
use sluice_state::{Key, OpId, Ops};
use sluice_wire::parse::{Fragment, PacketMeta, L4};
use sluice_wire::rewrite::{set_endpoint, Endpoint};
use sluice_wire::tcp::flags::{ACK, FIN, RST, SYN};
use sluice_wire::FlowKey;

use crate::config::Algorithm;
use crate::conn::{Conn, FIN_CLIENT, FIN_SERVER, RST_SEEN};
use crate::{Lb, TABLE_CONN};

/// What gathering found about a packet.
#[derive(Clone, Copy)]
pub enum Plan {
    /// Not balanced.
    Skip,
    /// Client to VIP.
    In {
        /// The connection record.
        slot: u32,
    },
    /// Backend `backend` to client; `ret` is the reply direction's record.
    Out {
        /// The connection record.
        slot: u32,
        /// The backend the reply comes from.
        backend: u16,
        /// The reply record.
        ret: u32,
    },
}

/// A connection record's bookkeeping for one batch.
pub struct Client {
    /// The canonical client flow.
    pub canon: FlowKey,
    /// The service.
    pub service: u16,
    /// Hash of the client flow, for Maglev.
    pub hash: u32,
    /// The client flow's direction-invariant hash if client packets use the record
    /// (then this instance writes it).
    pub own: Option<u32>,
    /// The reply record consulted for the client direction (`rets` index).
    pub ret: Option<u32>,
    /// A store read of the record after a cached copy named another backend.
    pub fresh: Option<OpId>,
    /// The connection's closing state changed: re-arm its timer.
    pub rearm: bool,
    /// Flags changed: the write goes to the store before the batch leaves.
    pub through: bool,
    /// A new connection is being claimed in this batch.
    pub new: bool,
    /// The time of the packet that opened it (its `last_seen`).
    pub born: u64,
    /// The flags and `last_seen` that the connection's later client packets
    /// in this batch leave it with (`None` until its first is seen).
    pub folded: Option<(u8, u64)>,
    /// The claim.
    pub cas: Option<OpId>,
    /// A read of the winner's record after a lost claim.
    pub reread: Option<OpId>,
}

/// The reply direction's record of a connection to one backend (table
/// `TABLE_RET`, keyed by the client flow and the backend): `last_seen` and the
/// flags the backend's packets set. Written only by the instance the replies go
/// to; read by the client direction only when its own record cannot decide.
pub struct Reply {
    /// The reply flow's direction-invariant hash if this batch has replies of it
    /// (then this instance writes the record).
    pub hash: Option<u32>,
    /// The connection's closing state changed: re-arm its timer at this deadline.
    pub rearm: Option<u64>,
    /// Flags changed: the write goes to the store before the batch leaves.
    pub through: bool,
    /// Created for replies that waited for their connection's claim.
    pub with_claim: bool,
    /// The record was already written this batch before those replies.
    pub was_dirty: bool,
}

/// The batch's reply records.
pub type Replies = Records<Key, Conn, Reply, FxBuildHasher, Option<Conn>>;

impl BatchNf for Lb {
    type Id = Key;
    type Value = Conn;
    type Extra = Client;
    /// Connections are written by compare-and-set against the value read.
    type Old = Option<Conn>;
    type Plan = Plan;
    type Hasher = FxBuildHasher;

    fn pass(&mut self) -> &mut Pass<Self> {
        &mut self.pass
    }

    #[inline]
    fn plan(&mut self, p: &Packet, pass: &mut Pass<Self>) -> Result<Plan, &'static str> {
        self.c.packets += 1;
        if p.meta.is_tunnelled() {
            // Translating inside a tunnel would leave its outer checksums and
            // the tunnel endpoints' view wrong; a chain that must translate
            // tunnels by their outer headers sets `decapsulate: false`.
            self.c.encapsulated += 1;
            return Err("encapsulated");
        }
        self.classify(&p.meta, pass)
    }

    fn decide(
        &mut self,
        i: usize,
        p: &mut Packet,
        plan: Plan,
        pass: &mut Pass<Self>,
        ctx: &mut Ctx<'_>,
    ) {
        let (slot, inbound) = match plan {
            Plan::Skip => return,
            Plan::In { slot } => (slot, true),
            Plan::Out { slot, .. } => (slot, false),
        };
        let now = p.ts_ns;
        let m = &p.meta;
        let s = &mut pass.recs[slot];
        if s.x.new {
            self.pending.push(i as u32);
            return;
        }
        let tcp = m.l4 == L4::Tcp;
        let syn = tcp && m.tcp_flags & (SYN | ACK | RST) == SYN;
        let ret = match plan {
            Plan::Out { ret, .. } => Some(ret),
            _ => s.x.ret,
        };
        let r = ret.and_then(|r| self.rets[r].cur);
        let view = s.cur.map(|c| Self::merged(&c, r.as_ref()));
        let usable = match (s.cur, view) {
            (Some(c), Some(v)) if ret.is_none() => self.alive_alone(&c, now).then_some(v),
            (Some(_), Some(v)) => self.alive(&v, now).then_some(v),
            _ => None,
        };
        match usable {
            // A new SYN on a closing connection's 4-tuple is a new connection.
            // Its backend was drained past its deregistration delay: out of
            // consideration entirely, so nothing more reaches it or comes from it.
            Some(v) if self.removed(&v) => {
                self.c.deregistered += 1;
                p.drop_by(ctx.stage, "deregistered");
            }
            Some(v) if !(syn && inbound && v.closing()) => {
                let flags = |mut f: u8, set: u8| {
                    if tcp {
                        if m.tcp_flags & RST != 0 {
                            f |= RST_SEEN;
                        }
                        if m.tcp_flags & FIN != 0 {
                            f |= set;
                        }
                    }
                    f
                };
                if inbound {
                    // The client direction's own record.
                    let c = s.cur.unwrap_or(v);
                    let mut n = c;
                    n.flags = flags(c.flags, FIN_CLIENT);
                    if n.flags != c.flags || now.saturating_sub(c.last_seen_ns) >= self.refresh_ns {
                        n.last_seen_ns = now.max(c.last_seen_ns);
                        let nv = Self::merged(&n, r.as_ref());
                        s.x.rearm |= nv.closing() != v.closing();
                        s.x.through |= n.flags != c.flags;
                        s.cur = Some(n);
                        s.dirty = true;
                    }
                } else if let Some(ri) = ret {
                    // The reply direction's own record, created on its first
                    // packet; a SYN-ACK starts a new connection's flags afresh.
                    let e = &self.rets[ri];
                    let base = e
                        .cur
                        .filter(|x| x.backend == v.backend && x.service == v.service);
                    let mut n = base.unwrap_or(Conn {
                        flags: 0,
                        last_seen_ns: 0,
                        ..v
                    });
                    if tcp && m.tcp_flags & SYN != 0 {
                        n.flags = 0;
                    }
                    n.flags = flags(n.flags, FIN_SERVER);
                    let old_flags = base.map(|b| b.flags);
                    if old_flags != Some(n.flags)
                        || now.saturating_sub(n.last_seen_ns) >= self.refresh_ns
                    {
                        n.last_seen_ns = now.max(n.last_seen_ns);
                        let c = s.cur.unwrap_or(v);
                        let nv = Self::merged(&c, Some(&n));
                        let rearm = (nv.closing() != v.closing()).then(|| self.deadline(&nv));
                        let e = &mut self.rets[ri];
                        e.x.through |= old_flags != Some(n.flags);
                        e.x.rearm = rearm.or(e.x.rearm);
                        e.cur = Some(n);
                        e.dirty = true;
                    }
                }
                let (frame, meta) = p.data_and_meta_mut();
                if let Err(r) = self.rewrite(frame, meta, plan, &v) {
                    p.drop_by(ctx.stage, r);
                }
            }
            _ => {
                if !inbound || (tcp && !syn) {
                    self.c.no_state += 1;
                    p.drop_by(ctx.stage, "no_state");
                    return;
                }
                s.x.new = true;
                s.x.born = now;
                let svc = s.x.service as usize;
                self.need_loads |= self.services[svc].algorithm == Algorithm::LeastConnections;
                self.pending.push(i as u32);
            }
        }
    }

    /// Changed connection records, except new ones (claimed later).
    fn write(&self, s: &Record<Conn, Client, Option<Conn>>, ops: &mut Ops) {
        let (false, Some(cur)) = (s.x.new, s.cur) else {
            return;
        };
        let proto = self.services[cur.service as usize].proto;
        let half = self.min_timeout(proto) / 2;
        Self::queue_write(ops, s.key, s.old, cur, s.x.own, s.x.through, half);
        if s.x.rearm {
            let r = s.x.ret.and_then(|r| self.rets[r].cur);
            ops.arm_timer(s.key, self.deadline(&Self::merged(&cur, r.as_ref())));
        }
    }
}

impl Lb {
    /// The reply record of (client flow, backend), read on `ops`; `hash`: the
    /// reply flow's hash if a reply of this batch uses it.
    pub(crate) fn ret_for(rets: &mut Replies, ops: &mut Ops, key: Key, hash: Option<u32>) -> u32 {
        let r = rets.read(key, ops, || {
            // Only the instance the replies go to writes it: absence may be cached.
            let how = hash.map_or(Read::Store, Read::Owned);
            let x = Reply {
                hash,
                rearm: None,
                through: false,
                with_claim: false,
                was_dirty: false,
            };
            (key, how, x)
        });
        let x = &mut rets[r].x;
        x.hash = x.hash.or(hash);
        r
    }

    fn slot_for(
        &mut self,
        pass: &mut Pass<Lb>,
        client_flow: &FlowKey,
        service: u16,
        reply_hash: Option<u32>,
    ) -> u32 {
        let canon = client_flow.canonical().0;
        let key = Key::flow(self.ns, TABLE_CONN, &canon, &[]);
        let own = reply_hash.is_none().then(|| client_flow.symmetric_hash());
        let s = pass.record(key, || {
            // The client direction owns the record; the reply direction (steered by
            // the reply flow's hash) may cache it only while present: the client
            // direction creates it.
            let how = match (own, reply_hash) {
                (Some(h), _) => Read::Owned(h),
                (None, Some(h)) => Read::Present(h),
                (None, None) => Read::Store,
            };
            let x = Client {
                canon,
                service,
                hash: client_flow.directional_hash(),
                own,
                ret: None,
                fresh: None,
                rearm: false,
                through: false,
                new: false,
                born: 0,
                folded: None,
                cas: None,
                reread: None,
            };
            (key, how, x)
        });
        let x = &mut pass.recs[s].x;
        x.own = x.own.or(own);
        s
    }

    #[inline]
    fn classify(&mut self, m: &PacketMeta, pass: &mut Pass<Lb>) -> Result<Plan, &'static str> {
        let f = &m.flow;
        if m.fragment == Fragment::Later {
            // No ports to find the connection by: drop what is addressed to a VIP.
            if self.services.iter().any(|s| s.vip == f.dst) {
                self.c.fragments += 1;
                return Err("fragment");
            }
            return Ok(Plan::Skip);
        }
        if !matches!(m.l4, L4::Tcp | L4::Udp) {
            return Ok(Plan::Skip);
        }
        if let Some(&svc) = self.vips.get(&(f.dst, f.dst_port, f.proto)) {
            return Ok(Plan::In {
                slot: self.slot_for(pass, f, svc, None),
            });
        }
        if let Some(&(svc, backend)) = self.backs.get(&(f.src, f.src_port, f.proto)) {
            let client = self.client_of(f, svc);
            let reply_hash = f.symmetric_hash();
            let slot = self.slot_for(pass, &client, svc, Some(reply_hash));
            let key = self.ret_key(&pass.recs[slot].x.canon, backend);
            let ret = Self::ret_for(&mut self.rets, &mut pass.ops, key, Some(reply_hash));
            return Ok(Plan::Out { slot, backend, ret });
        }
        Ok(Plan::Skip)
    }

    /// Queues the write of a changed record by the direction it belongs to: a
    /// refresh of a record refreshed less than half the shortest timeout ago is a
    /// plain write (deferrable under a lease; a timer handler deletes a record only
    /// once both directions are idle past that timeout, so it cannot resurrect
    /// one), anything else a compare-and-set against the value read.
    pub(crate) fn queue_write(
        ops: &mut Ops,
        key: Key,
        old: Option<Conn>,
        new: Conn,
        hash: Option<u32>,
        through: bool,
        half: u64,
    ) {
        let young = old.is_some_and(|o| new.last_seen_ns < o.last_seen_ns.saturating_add(half));
        match hash {
            Some(h) if young && !through => ops.put_value_deferred(key, &new, h),
            Some(h) if young => ops.put_value_owned(key, &new, h),
            Some(h) => ops.compare_and_set_owned(key, old.as_ref(), Some(&new), h),
            None => ops.compare_and_set(key, old.as_ref(), Some(&new)),
        };
    }

    /// Rewrites a packet for connection `c`.
    pub(crate) fn rewrite(
        &mut self,
        frame: &mut [u8],
        meta: &mut PacketMeta,
        plan: Plan,
        c: &Conn,
    ) -> Result<(), &'static str> {
        let s = &self.services[c.service as usize];
        let r = match plan {
            Plan::In { .. } => {
                let b = &s.backends[c.backend as usize];
                self.c.to_backend += 1;
                set_endpoint(frame, meta, Endpoint::Dst, b.addr, b.port)
            }
            Plan::Out { backend, .. } => {
                if backend != c.backend {
                    self.c.no_state += 1;
                    return Err("no_state");
                }
                self.c.to_client += 1;
                set_endpoint(frame, meta, Endpoint::Src, s.vip, s.port)
            }
            Plan::Skip => Ok(()),
        };
        r.map_err(|_| {
            self.c.rewrite_errors += 1;
            "rewrite_error"
        })
    }
}
