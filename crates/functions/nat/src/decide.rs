//! The NAT's per-packet decisions on the shared batch skeleton
//! ([`sluice_nf::batch`]): which record a packet needs, its translation, and
//! the write of a changed record.

use rustc_hash::FxBuildHasher;
use sluice_nf::batch::{BatchNf, Pass, Read, Record};
use sluice_nf::{Batch, Ctx, Packet};
use sluice_state::{Key, OpId, Ops};
use sluice_wire::parse::{Fragment, PacketMeta, L4};
use sluice_wire::rewrite::{set_embedded_endpoint, set_endpoint, Endpoint};
use sluice_wire::tcp::flags::{FIN, RST};
use sluice_wire::{icmp, ip_proto, FlowKey, IpAddr};

use crate::mapping::{fwd_flow, rev_flow, Mapping, FIN_IN, FIN_OUT, RST_SEEN};
use crate::{Ipv6Policy, Nat, TABLE_FWD, TABLE_REV};

/// How a packet is translated.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// Inside to outside: source to the public endpoint.
    Out,
    /// A reply: destination back to the inside endpoint.
    In,
    /// An ICMP error about an inbound flow, sent from inside.
    OutErr,
    /// An ICMP error about an outbound flow, sent to the public address.
    InErr,
}

/// What gathering found about a packet.
#[derive(Clone, Copy)]
pub enum Plan {
    /// Not translated (not NAT traffic, or IPv6 passed).
    Skip,
    /// Translated with the mapping of record `slot`.
    Do {
        /// The record.
        slot: u32,
        /// How.
        dir: Dir,
    },
}

/// A mapping record's bookkeeping for one batch.
pub struct Flow {
    /// The flow the key was built from: the inside flow for forward records,
    /// the outside reply flow for reverse ones.
    pub flow: FlowKey,
    /// A forward record (keyed by the inside flow).
    pub fwd: bool,
    /// The flow's direction-invariant hash if a packet of the flow itself (not an
    /// ICMP error about it, which the data plane may steer elsewhere) uses the
    /// record: only then may a flow cache hold it.
    pub hash: Option<u32>,
    /// Flags changed: the write goes to the store before the batch leaves.
    pub through: bool,
    /// A read of the other direction's record (its own one looked expired).
    pub other: Option<OpId>,
    /// The pool allocation for a new mapping.
    pub alloc: Option<OpId>,
    /// An item taken from the reserve instead of `alloc`.
    pub pre: Option<u32>,
    /// The item of the new mapping.
    pub item: Option<u32>,
    /// The claim of the new mapping's forward record.
    pub cas: Option<OpId>,
    /// A read of the winner's mapping after a lost claim.
    pub reread: Option<OpId>,
    /// The time of the first packet waiting for a new mapping (its `last_seen`).
    pub born: Option<u64>,
    /// Where this record's rarely used mappings are kept ([`Side`]): `NO_SIDE`
    /// for nearly every record, which keeps records small to copy.
    pub side: u32,
    /// Changed by packets that waited for the batch's new mappings: written
    /// after them.
    pub late: bool,
    /// An outbound packet found the mapping idle by its own record: an item
    /// is taken ahead in case the other direction's does not keep it alive.
    pub maybe_expired: bool,
}

/// No [`Side`] entry.
pub const NO_SIDE: u32 = u32::MAX;

/// What a few records of a batch keep besides their [`Flow`]: the mappings of
/// an expiry or a new claim, kept apart so that every record stays small.
#[derive(Debug, Clone, Copy, Default)]
pub struct Side {
    /// The mapping this batch claimed for the record, as first written.
    pub made: Option<Mapping>,
    /// The mapping (forward record, reverse record) an outbound packet found
    /// idle past its timeout: replaced by a new one, as if its timer had
    /// removed it.
    pub expired: Option<(Mapping, Option<Mapping>)>,
}

impl Nat {
    /// The mapping claimed this batch for the record of `x`.
    #[inline]
    pub(crate) fn made_of(&self, x: &Flow) -> Option<Mapping> {
        self.sides.get(x.side as usize).and_then(|s| s.made)
    }

    /// The expired mappings the record of `x` replaces.
    #[inline]
    pub(crate) fn expired_of(&self, x: &Flow) -> Option<(Mapping, Option<Mapping>)> {
        self.sides.get(x.side as usize).and_then(|s| s.expired)
    }

    /// The side entry of `x`, made on first use.
    pub(crate) fn side_mut(&mut self, x: &mut Flow) -> &mut Side {
        if x.side == NO_SIDE {
            x.side = self.sides.len() as u32;
            self.sides.push(Side::default());
        }
        &mut self.sides[x.side as usize]
    }
}

impl BatchNf for Nat {
    type Id = Key;
    type Value = Mapping;
    type Extra = Flow;
    /// Mappings are refreshed by compare-and-set against the value read.
    type Old = Option<Mapping>;
    type Plan = Plan;
    type Hasher = FxBuildHasher;
    /// The second round trip (allocations and writes) also settles a flow
    /// cache, as it always did.
    const ALWAYS_WRITE: bool = true;

    fn pass(&mut self) -> &mut Pass<Self> {
        &mut self.pass
    }

    fn first_reads(&mut self, ops: &mut Ops) {
        if !self.pool_ready {
            ops.pool_init(self.pool_key, self.items);
        }
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

    /// Each direction of a connection reads and writes only its own record (the
    /// forward one keyed by the inside flow, the reverse one by the reply flow),
    /// so each record has one writer: the owner of its flow's hash. Packets of
    /// new flows wait for their allocation (`pending`); those whose record looks
    /// expired, for the other direction's (`recheck`). A packet that must
    /// wait for the next round is left unchanged, with `refused` set
    /// ([`Nat::decide_round`] calls this, not [`Pass::decide`]).
    #[inline]
    fn decide(
        &mut self,
        i: usize,
        p: &mut Packet,
        plan: Plan,
        pass: &mut Pass<Self>,
        ctx: &mut Ctx<'_>,
    ) {
        let Plan::Do { slot, dir } = plan else {
            return;
        };
        let now = p.ts_ns;
        let s = &mut pass.recs[slot];
        let proto = s.x.flow.proto;
        let Some(cur) = s.cur else {
            match dir {
                Dir::Out => {
                    if s.x.born.is_none() {
                        s.x.born = Some(now);
                        self.cut_before_idle(proto, now);
                    }
                    self.pending.push(i as u32);
                }
                // A reply, or an ICMP error about an outbound flow, may belong
                // to a mapping this batch opens (a SYN-ACK behind its SYN): it
                // waits for the claims, as it would find the mapping were it in
                // the next batch.
                Dir::In | Dir::InErr => self.pending.push(i as u32),
                // An error from inside about a flow whose mapping an earlier
                // packet of this round opens (its record is this one) waits
                // for that claim too; with no such packet there is none.
                Dir::OutErr if s.x.born.is_some() => self.pending.push(i as u32),
                _ => {
                    self.c.no_mapping += 1;
                    p.drop_by(ctx.stage, "no_mapping");
                }
            }
            return;
        };
        // Maybe idle past its timeout: as its timer would have removed it
        // by now, an outbound packet then opens a new mapping and an inbound
        // one finds none, unless the other direction kept it alive.
        if !self.alive_alone(proto, &cur, now) {
            // Maybe only the other direction kept it alive: ask its record.
            if s.x.other.is_none() {
                let k = self.other_key(s, &cur);
                // The store's copy is what this packet would find only if no
                // earlier packet of the round used that record.
                if pass.recs.find(&k).is_some_and(|o| {
                    let o = &pass.recs[o];
                    o.dirty || o.x.other.is_some() || o.x.born.is_some()
                }) {
                    self.refused = true;
                    return;
                }
                pass.recs[slot].x.other = Some(pass.ops.get(k));
            }
            if dir == Dir::Out {
                self.cut_before_idle(proto, now);
            }
            let s = &mut pass.recs[slot];
            s.x.maybe_expired |= dir == Dir::Out && self.expired_of(&s.x).is_none();
            self.recheck.push(i as u32);
            return;
        }
        let mp = self.touch(s, dir, cur, &p.meta, now);
        self.apply(p, dir, &mp, ctx.stage);
    }

    /// Records that waited for the other direction are written in the next
    /// round trip, after their recheck.
    fn write(&self, s: &Record<Mapping, Flow, Option<Mapping>>, ops: &mut Ops) {
        if s.x.other.is_none() {
            self.queue_write(ops, s);
        }
    }
}

impl Nat {
    /// Decides packets `from..` in order, as [`Pass::decide`] does, up to the
    /// round's cut: returns the first packet left undecided, if any.
    ///
    /// A round claims at most one new mapping per flow, so it stops before a
    /// packet that could find a mapping the round opens (or revives) idle
    /// past its timeout again: that packet would need a second one. Pool
    /// items are taken in packet order over all flows, so the next round
    /// starts at that packet, not just at that flow's packets. It also stops
    /// before a packet whose own record looks idle when an earlier packet of
    /// the round used the other direction's record: the store's copy, which
    /// the recheck reads, lacks that use. Normal batches span far less than a
    /// timeout and are never cut.
    #[inline]
    pub(crate) fn decide_round(
        &mut self,
        pass: &mut Pass<Nat>,
        batch: &mut Batch,
        ctx: &mut Ctx<'_>,
        from: usize,
    ) -> Option<usize> {
        pass.ops.clear();
        self.cut_at = u64::MAX;
        for (i, p) in batch.pkts.iter_mut().enumerate().skip(from) {
            let Some(plan) = pass.plans[i] else {
                continue;
            };
            if p.ts_ns >= self.cut_at {
                return Some(i);
            }
            BatchNf::decide(self, i, p, plan, pass, ctx);
            if self.refused {
                self.refused = false;
                return Some(i);
            }
        }
        None
    }

    /// Moves the round's cut before the first time a mapping of `proto` that
    /// an outbound packet at `now` opens or revives could look idle: its
    /// record's `last_seen` is then at least `now` less the refresh interval
    /// (a refresh within it is not written), and it looks idle alone after
    /// the shortest timeout at the earliest.
    fn cut_before_idle(&mut self, proto: u8, now: u64) {
        let at = now
            .saturating_add(self.min_timeout(proto))
            .saturating_sub(self.refresh_ns);
        self.cut_at = self.cut_at.min(at);
    }

    /// Gather, as [`Pass::gather`] does, of packets `from..`: after a cut, the
    /// records of the rest of the batch are read again, now with the earlier
    /// rounds' mappings. Earlier packets are done; none is counted twice.
    #[inline]
    pub(crate) fn gather_from(
        &mut self,
        pass: &mut Pass<Nat>,
        batch: &mut Batch,
        ctx: &Ctx<'_>,
        from: usize,
    ) {
        let counted = (self.c.packets, self.c.ipv6);
        pass.ops.clear();
        pass.recs.clear();
        pass.plans.clear();
        pass.plans.resize(from, None);
        self.first_reads(&mut pass.ops);
        for p in &mut batch.pkts[from..] {
            let mut plan = None;
            // Packets refused in an earlier gather are dropped (not live).
            // Other frames pass ([`BatchNf::unclassified`]).
            if p.is_live() && p.meta.is_ip() {
                match self.plan(p, pass) {
                    Ok(pl) => plan = Some(pl),
                    Err(reason) => p.drop_by(ctx.stage, reason),
                }
            }
            pass.plans.push(plan);
        }
        if from > 0 {
            (self.c.packets, self.c.ipv6) = counted;
        }
    }

    /// The record of `flow` (forward or reverse); `own`: a packet of the flow
    /// itself uses it.
    fn record(&mut self, pass: &mut Pass<Nat>, flow: FlowKey, fwd: bool, own: bool) -> u32 {
        let key = Key::flow(self.ns, if fwd { TABLE_FWD } else { TABLE_REV }, &flow, &[]);
        let hash = own.then(|| flow.symmetric_hash());
        let r = pass.record(key, || {
            // Forward records are created only by the owner of the inside flow, so
            // their absence may be cached; a reverse record is created by whichever
            // instance owns the inside flow, so only its presence may be.
            let how = match hash {
                Some(h) if fwd => Read::Owned(h),
                Some(h) => Read::Present(h),
                None => Read::Store,
            };
            let x = Flow {
                flow,
                fwd,
                hash,
                through: false,
                other: None,
                alloc: None,
                pre: None,
                item: None,
                cas: None,
                reread: None,
                born: None,
                side: NO_SIDE,
                late: false,
                maybe_expired: false,
            };
            (key, how, x)
        });
        let x = &mut pass.recs[r].x;
        x.hash = x.hash.or(hash);
        r
    }

    /// The key of the other direction's record of mapping `m` read under `s`.
    pub(crate) fn other_key(&self, s: &Record<Mapping, Flow, Option<Mapping>>, m: &Mapping) -> Key {
        if s.x.fwd {
            let (pa, pp) = self.public_of(m.item);
            Key::flow(self.ns, TABLE_REV, &rev_flow(&s.x.flow, pa, pp), &[])
        } else {
            Key::flow(self.ns, TABLE_FWD, &fwd_flow(&s.x.flow, m), &[])
        }
    }

    /// Translates `p` with mapping `mp`, dropping it if the rewrite fails.
    pub(crate) fn apply(&mut self, p: &mut Packet, dir: Dir, mp: &Mapping, stage: u8) {
        let (frame, meta) = p.data_and_meta_mut();
        if self.translate(frame, meta, dir, mp).is_err() {
            self.c.rewrite_errors += 1;
            p.drop_by(stage, "rewrite_error");
        }
    }

    /// Whether the packet has ports (or an echo identifier) to translate.
    pub(crate) fn has_ports(m: &PacketMeta) -> bool {
        match m.l4 {
            L4::Tcp | L4::Udp => true,
            L4::Icmp => {
                m.icmp_type == icmp::v4::ECHO_REQUEST || m.icmp_type == icmp::v4::ECHO_REPLY
            }
            _ => false,
        }
    }

    /// Which record a packet needs and how it is translated.
    #[inline]
    fn classify(&mut self, m: &PacketMeta, pass: &mut Pass<Nat>) -> Result<Plan, &'static str> {
        if m.is_v6() {
            self.c.ipv6 += 1;
            return match self.ipv6 {
                Ipv6Policy::Pass => Ok(Plan::Skip),
                Ipv6Policy::Drop => Err("ipv6"),
            };
        }
        let src_in = self.is_inside(&m.flow.src);
        let dst_in = self.is_inside(&m.flow.dst);
        let dst_pub = self.is_public(&m.flow.dst);
        let outbound = src_in && !dst_in;
        if !outbound && !dst_pub {
            return Ok(Plan::Skip);
        }
        if m.fragment == Fragment::Later {
            self.c.fragments += 1;
            return Err("fragment");
        }
        if let Some(e) = m
            .icmp_embedded
            .filter(|_| icmp::is_error(m.icmp_type, false))
        {
            // The quoted packet travelled the other way: its reverse is our flow.
            let f = e.flow.reverse();
            if !matches!(f.proto, ip_proto::TCP | ip_proto::UDP | ip_proto::ICMP) || !f.src.is_v4()
            {
                self.c.unsupported += 1;
                return Err("unsupported_protocol");
            }
            return Ok(if dst_pub {
                Plan::Do {
                    slot: self.record(pass, f, false, false),
                    dir: Dir::InErr,
                }
            } else {
                Plan::Do {
                    slot: self.record(pass, f, true, false),
                    dir: Dir::OutErr,
                }
            });
        }
        if !Self::has_ports(m) {
            self.c.unsupported += 1;
            return Err("unsupported_protocol");
        }
        Ok(if dst_pub {
            Plan::Do {
                slot: self.record(pass, m.flow, false, true),
                dir: Dir::In,
            }
        } else {
            Plan::Do {
                slot: self.record(pass, m.flow, true, true),
                dir: Dir::Out,
            }
        })
    }

    /// Rewrites a packet with mapping `mp`. `Err` only on a rewrite failure.
    pub(crate) fn translate(
        &mut self,
        frame: &mut [u8],
        meta: &mut PacketMeta,
        dir: Dir,
        mp: &Mapping,
    ) -> Result<(), sluice_wire::Error> {
        let (pa, pp) = self.public_of(mp.item);
        let (ia, ip) = (IpAddr::V4(mp.inside_addr), mp.inside_port);
        match dir {
            Dir::Out => {
                set_endpoint(frame, meta, Endpoint::Src, IpAddr::V4(pa), pp)?;
                self.c.translated_out += 1;
            }
            Dir::In => {
                set_endpoint(frame, meta, Endpoint::Dst, ia, ip)?;
                self.c.translated_in += 1;
            }
            Dir::InErr => {
                set_endpoint(frame, meta, Endpoint::Dst, ia, 0)?;
                set_embedded_endpoint(frame, meta, Endpoint::Src, ia, ip)?;
                self.c.icmp_errors_translated += 1;
            }
            Dir::OutErr => {
                set_endpoint(frame, meta, Endpoint::Src, IpAddr::V4(pa), 0)?;
                set_embedded_endpoint(frame, meta, Endpoint::Dst, IpAddr::V4(pa), pp)?;
                self.c.icmp_errors_translated += 1;
            }
        }
        Ok(())
    }

    /// Queues the write of a changed record. Only the direction the record
    /// belongs to writes it. A refresh of a record far from expiring is a plain
    /// write (deferrable under a lease): a timer handler deletes a mapping only
    /// once both records are idle past the shortest timeout, which a record
    /// refreshed less than half of it ago cannot be, so the write never
    /// resurrects a deleted mapping. Otherwise (and for flag changes of such a
    /// record) a compare-and-set against the value read.
    pub(crate) fn queue_write(&self, ops: &mut Ops, s: &Record<Mapping, Flow, Option<Mapping>>) {
        let (Some(old), Some(new)) = (s.old, s.cur) else {
            return;
        };
        let half = self.min_timeout(s.x.flow.proto) / 2;
        let young = new.last_seen_ns < old.last_seen_ns.saturating_add(half);
        match s.x.hash {
            Some(h) if young && !s.x.through => ops.put_value_deferred(s.key, &new, h),
            Some(h) if young => ops.put_value_owned(s.key, &new, h),
            Some(h) => ops.compare_and_set_owned(s.key, Some(&old), Some(&new), h),
            None => ops.compare_and_set(s.key, Some(&old), Some(&new)),
        };
    }

    /// Applies a packet of direction `dir` to record `s` (flags, refresh) and
    /// returns the mapping to translate with.
    pub(crate) fn touch(
        &self,
        s: &mut Record<Mapping, Flow, Option<Mapping>>,
        dir: Dir,
        mut mp: Mapping,
        meta: &PacketMeta,
        now: u64,
    ) -> Mapping {
        if !matches!(dir, Dir::Out | Dir::In) {
            return mp;
        }
        let c = s.cur.unwrap_or(mp);
        mp.flags = c.flags;
        if meta.l4 == L4::Tcp {
            let f = meta.tcp_flags;
            if f & RST != 0 {
                mp.flags |= RST_SEEN;
            }
            if f & FIN != 0 {
                mp.flags |= if dir == Dir::Out { FIN_OUT } else { FIN_IN };
            }
        }
        mp.last_seen_ns = c.last_seen_ns;
        if mp.flags != c.flags || now.saturating_sub(c.last_seen_ns) >= self.refresh_ns {
            mp.last_seen_ns = now.max(c.last_seen_ns);
            s.x.through |= mp.flags != c.flags;
            s.cur = Some(mp);
            s.dirty = true;
        }
        mp
    }
}
