//! Source NAT (StatelessNF Algorithm 5), IPv4.
//!
//! Packets from the configured inside prefixes get their source rewritten to a
//! public (address, port) taken from a pool shared by every instance through the
//! state store (`pool_alloc`, least recently freed first); replies to a public
//! (address, port) get their destination rewritten back. Each mapping is stored
//! twice, under the inside flow (forward key) and under the outside reply flow
//! (reverse key), with the same 20-byte [`Mapping`] value, so a packet of either
//! direction needs one read.
//!
//! Per batch ([`sluice_nf::batch`]): one `execute` reads every mapping the batch needs (and creates the
//! pool on first use); a second writes changed mappings and allocates pool items for
//! new flows; only when there are new flows, a third writes their mappings (reverse
//! first, then a compare-and-set of the forward key against "absent", so that of two
//! instances racing on the same new flow exactly one wins), and only when such a race
//! was lost, a fourth returns the loser's item and reads the winner's mapping.
//!
//! Pool items are freed only when a mapping has expired, so a public port is
//! reused only after its previous mapping has expired.
//!
//! Expiry is judged at each packet's own time, with the timer's rule (idle, in
//! both directions, for the timeout of its flags): a packet finding its mapping
//! expired behaves as if the timer had removed it (an outbound one gets a new
//! mapping, its item taken ahead in packet order and returned if the other
//! direction kept the old one alive; a reply is dropped). Packets of a batch
//! that wait for a new mapping (later outbound packets, replies behind a
//! SYN) are then decided in order as if each came alone, and what they change
//! is written in one more round trip, only then.
//!
//! A batch is decided in rounds, one unless it spans nearly a timeout: a
//! round stops before a packet that could find a mapping the round opened
//! (or revived) idle again, which needs a second new mapping, and before a
//! packet whose own record looks idle when the other direction's record was
//! already used in the round (the store's copy would miss that). The next
//! round reads the rest of the batch's records again and starts there, so
//! pool items are still taken in packet order, as one packet per batch
//! takes them.
//!
//! IPv6 is not translated: IPv6 packets pass untouched (`ipv6: pass`, default) or
//! are dropped (`ipv6: drop`).

mod claim;
mod config;
mod decide;
mod mapping;
mod reserve;

use rustc_hash::FxHashMap;
use sluice_nf::batch::{self, Pass};
use sluice_nf::{Batch, Ctx, NetworkFunction, NfError};
use sluice_state::{Key, Namespace, OpId, Ops, StateStore};
use sluice_wire::parse::Fragment;
use sluice_wire::{ip_proto, IpAddr};

pub use config::{build, Config, ConfigError, Ipv6Policy, Timeouts};
pub use mapping::{Mapping, FIN_IN, FIN_OUT, MAPPING_BYTES, MAPPING_VERSION, RST_SEEN};

use mapping::rev_flow;
use reserve::Block;

const TABLE_FWD: u8 = 1;
const TABLE_REV: u8 = 2;
const TABLE_POOL: u8 = 3;
/// Blocks of pool items an instance took ahead (`port_reserve`): one record per
/// block, keyed by its first item, holding the block's items (u32 each), with a
/// timer.
const TABLE_RESV: u8 = 4;
/// How many of a block's items its owner has handed out (u32), same payload as
/// the block's record. Items are used in order, so the rest are the unused ones.
const TABLE_RESV_USED: u8 = 5;
/// A block's unused items are freed by its timer after this long, on whichever
/// instance takes the timer; its owner uses them only during the first half,
/// and returns the rest itself after that.
const RESERVE_TTL_NS: u64 = 60_000_000_000;
const TIMER_BATCH: usize = 1024;

#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    packets: u64,
    translated_out: u64,
    translated_in: u64,
    icmp_errors_translated: u64,
    new_mappings: u64,
    pool_exhausted: u64,
    no_mapping: u64,
    races_lost: u64,
    expired: u64,
    fragments: u64,
    unsupported: u64,
    ipv6: u64,
    decode_errors: u64,
    rewrite_errors: u64,
    reservations_expired: u64,
    encapsulated: u64,
}

/// The source NAT. See the crate documentation.
pub struct Nat {
    ns: Namespace,
    inside: Vec<(u32, u32)>,
    pool: Vec<u32>,
    pool_index: FxHashMap<u32, u32>,
    port_lo: u16,
    nports: u32,
    items: u64,
    pool_key: Key,
    pool_ready: bool,
    ipv6: Ipv6Policy,
    t_est: u64,
    t_trans: u64,
    t_udp: u64,
    t_icmp: u64,
    refresh_ns: u64,
    /// `port_reserve`: items to allocate ahead (0: none).
    reserve_n: usize,
    /// Blocks taken ahead, oldest first.
    reserve: std::collections::VecDeque<Block>,
    /// This batch's take for the reserve.
    refill: Option<OpId>,
    /// Encoding buffer for block records.
    scratch: Vec<u8>,
    pass: Pass<Nat>,
    ops2: Ops,
    pending: Vec<u32>,
    /// Packets whose own record looked expired: decided with the other record.
    recheck: Vec<u32>,
    /// Packets from this time on are left to the next round of the batch: a
    /// mapping the round opens or revives could look idle to them
    /// ([`Nat::decide_round`]). `u64::MAX` until a round has such a mapping.
    cut_at: u64,
    /// The packet being decided waits for the next round.
    refused: bool,
    /// The batch's [`decide::Side`] entries.
    sides: Vec<decide::Side>,
    keys: Vec<Key>,
    ids: Vec<Option<OpId>>,
    ids2: Vec<Option<(OpId, Mapping)>>,
    revs: Vec<Option<(OpId, Mapping)>>,
    c: Counters,
}

impl Nat {
    #[inline]
    fn is_inside(&self, a: &IpAddr) -> bool {
        match a.v4_u32() {
            Some(x) => self.inside.iter().any(|&(n, m)| x & m == n),
            None => false,
        }
    }

    #[inline]
    fn is_public(&self, a: &IpAddr) -> bool {
        a.v4_u32().is_some_and(|x| self.pool_index.contains_key(&x))
    }

    /// The public (address, port) of a pool item.
    pub fn public_of(&self, item: u32) -> ([u8; 4], u16) {
        let a = self.pool[(item / self.nports) as usize % self.pool.len()];
        (a.to_be_bytes(), self.port_lo + (item % self.nports) as u16)
    }

    /// Number of (address, port) pairs in the pool.
    pub fn pool_size(&self) -> u64 {
        self.items
    }

    fn timeout(&self, proto: u8, flags: u8) -> u64 {
        match proto {
            ip_proto::TCP => {
                if flags & RST_SEEN != 0 || flags & (FIN_IN | FIN_OUT) == FIN_IN | FIN_OUT {
                    self.t_trans
                } else {
                    self.t_est
                }
            }
            ip_proto::UDP => self.t_udp,
            _ => self.t_icmp,
        }
    }

    #[inline]
    fn alive(&self, proto: u8, m: &Mapping, now: u64) -> bool {
        now < m.last_seen_ns.saturating_add(self.timeout(proto, m.flags))
    }

    /// The shortest timeout a mapping of `proto` can have (TCP: after FIN or RST).
    fn min_timeout(&self, proto: u8) -> u64 {
        match proto {
            ip_proto::TCP => self.t_trans.min(self.t_est),
            ip_proto::UDP => self.t_udp,
            _ => self.t_icmp,
        }
    }

    /// Whether one direction's record alone shows the mapping alive. A record with
    /// a FIN or RST flag is judged by the shortest timeout, since the other
    /// direction's flags may make the mapping transitory; `false` means "ask the
    /// other record" ([`Nat::merged`]), not "expired".
    fn alive_alone(&self, proto: u8, m: &Mapping, now: u64) -> bool {
        let t = if m.flags != 0 {
            self.min_timeout(proto)
        } else {
            self.timeout(proto, 0)
        };
        now < m.last_seen_ns.saturating_add(t)
    }

    /// The mapping as both directions' records describe it: the later `last_seen`
    /// and the flags of both (`None` if the records are not of one mapping).
    fn merged(a: &Mapping, b: Option<&Mapping>) -> Option<Mapping> {
        match b {
            None => Some(*a),
            Some(b) if b.item == a.item && b.inside_addr == a.inside_addr => Some(Mapping {
                flags: a.flags | b.flags,
                last_seen_ns: a.last_seen_ns.max(b.last_seen_ns),
                ..*a
            }),
            Some(_) => None,
        }
    }

    /// Decides packets `from..` of the batch, up to the round's cut if it has
    /// one (returned: the first packet left to the next round, which reads the
    /// records again, now with this round's mappings).
    #[inline]
    fn round(
        &mut self,
        batch: &mut Batch,
        ctx: &mut Ctx<'_>,
        store: &mut dyn StateStore,
        pass: &mut Pass<Nat>,
        from: usize,
    ) -> Result<Option<usize>, NfError> {
        self.pending.clear();
        self.recheck.clear();
        self.sides.clear();
        self.gather_from(pass, batch, ctx, from);
        if pass.recs.is_empty() && self.pool_ready {
            return Ok(None);
        }
        self.c.decode_errors += pass.read(self, store, ctx.now_ns)?;
        self.pool_ready = true;
        let cut = self.decide_round(pass, batch, ctx, from);

        // Round trip 2: reads of other records, allocations for new flows, and
        // writes of changed records not waiting for a recheck.
        self.allocate(pass, ctx.now_ns);
        pass.write(self, store)?;

        // Round trip 3: the rechecked records' writes, the reserve's new
        // block, and new mappings.
        self.ops2.clear();
        self.recheck(batch, ctx, pass);
        self.record_refill(pass, ctx.now_ns);
        self.claim(pass, ctx.now_ns);
        if !self.ops2.is_empty() {
            store.execute(&mut self.ops2)?;
        }
        if self.pending.is_empty() {
            return Ok(cut);
        }

        // Round trip 4, only after a lost race: undo ours, adopt the winner's.
        self.settle_races(pass, store)?;
        if self.finish_pending(batch, ctx, pass) {
            self.write_late(pass, store)?;
        }
        Ok(cut)
    }
}

impl NetworkFunction for Nat {
    fn kind(&self) -> &'static str {
        "nat"
    }

    fn namespace(&self) -> Namespace {
        self.ns
    }

    /// The mapping each translated TCP/UDP/echo packet reads by its own flow:
    /// outbound packets their forward record (owned), inbound ones their
    /// reverse record (present only). ICMP errors read another flow's record.
    fn prefetch(&self, batch: &Batch, ops: &mut Ops) {
        for p in batch
            .pkts
            .iter()
            .filter(|p| p.is_live() && p.meta.is_ip() && !p.meta.is_tunnelled())
        {
            let m = &p.meta;
            if m.is_v6()
                || m.fragment == Fragment::Later
                || m.icmp_embedded.is_some()
                || !Self::has_ports(m)
            {
                continue;
            }
            let h = m.flow.symmetric_hash();
            if self.is_public(&m.flow.dst) {
                if ops.first_listing(h, self.ns, TABLE_REV) {
                    ops.get_present(Key::flow(self.ns, TABLE_REV, &m.flow, &[]), h);
                }
            } else if self.is_inside(&m.flow.src)
                && !self.is_inside(&m.flow.dst)
                && ops.first_listing(h, self.ns, TABLE_FWD)
            {
                ops.get_owned(Key::flow(self.ns, TABLE_FWD, &m.flow, &[]), h);
            }
        }
    }

    fn process(
        &mut self,
        batch: &mut Batch,
        ctx: &mut Ctx<'_>,
        store: &mut dyn StateStore,
    ) -> Result<(), NfError> {
        batch::split(self, |nat, pass| {
            let mut from = 0;
            while let Some(cut) = nat.round(batch, ctx, store, pass, from)? {
                from = cut;
            }
            Ok(())
        })
    }

    /// A mapping's timer (armed on its forward record) deletes it only when both
    /// directions' records are idle past the mapping's timeout (their later
    /// `last_seen`, the flags of both); otherwise it re-arms. The forward record
    /// goes first, by compare-and-set against the value read; the reverse record
    /// and the pool item go only with it.
    fn on_timers(&mut self, ctx: &mut Ctx<'_>, store: &mut dyn StateStore) -> Result<(), NfError> {
        let now = ctx.now_ns;
        loop {
            self.keys.clear();
            store.take_expired(self.ns, now, TIMER_BATCH, &mut self.keys)?;
            if self.keys.is_empty() {
                return Ok(());
            }
            let taken = self.keys.len();
            self.free_unused_reservations(store)?;
            self.pass.ops.clear();
            self.ids.clear();
            for &k in &self.keys {
                self.ids.push(Some(self.pass.ops.get(k)));
            }
            store.execute(&mut self.pass.ops)?;
            // The reverse records of the forward ones read.
            self.ops2.clear();
            self.revs.clear();
            for (n, &k) in self.keys.iter().enumerate() {
                let mut entry = None;
                if let (Some(g), Some(flow)) = (self.ids[n], k.flow_key()) {
                    match self.pass.ops.decode::<Mapping>(g) {
                        Ok(Some(m)) => {
                            let (pa, pp) = self.public_of(m.item);
                            let rk = Key::flow(self.ns, TABLE_REV, &rev_flow(&flow, pa, pp), &[]);
                            entry = Some((self.ops2.get(rk), m));
                        }
                        Ok(None) => {}
                        Err(_) => self.ids[n] = None,
                    }
                }
                self.revs.push(entry);
            }
            if !self.ops2.is_empty() {
                store.execute(&mut self.ops2)?;
            }
            // Delete only what is still the expired value read.
            self.pass.ops.clear();
            self.ids2.clear();
            for (n, &k) in self.keys.iter().enumerate() {
                let mut entry = None;
                match (self.revs[n], self.ids[n], k.flow_key()) {
                    (Some((g, m)), _, Some(flow)) => {
                        let rev = self.ops2.decode::<Mapping>(g).ok().flatten();
                        let both = Self::merged(&m, rev.as_ref()).unwrap_or(m);
                        if self.alive(flow.proto, &both, now) {
                            let d = both
                                .last_seen_ns
                                .saturating_add(self.timeout(flow.proto, both.flags));
                            self.pass.ops.arm_timer(k, d);
                        } else {
                            entry = Some((self.pass.ops.compare_and_set(k, Some(&m), None), m));
                        }
                    }
                    (None, None, _) if k.flow_key().is_some() => {
                        // Undecodable forward record.
                        self.c.decode_errors += 1;
                        self.pass.ops.delete(k);
                    }
                    _ => {}
                }
                self.ids2.push(entry);
            }
            store.execute(&mut self.pass.ops)?;
            // The reverse record and the pool item go only with a forward record we
            // removed; one a packet revived meanwhile is checked again later.
            self.ops2.clear();
            for (k, e) in self.keys.iter().zip(&self.ids2) {
                let (Some((cas, m)), Some(flow)) = (e, k.flow_key()) else {
                    continue;
                };
                if !self.pass.ops.swapped(*cas) {
                    self.ops2
                        .arm_timer(*k, now.saturating_add(self.min_timeout(flow.proto)));
                    continue;
                }
                let (pa, pp) = self.public_of(m.item);
                let rk = Key::flow(self.ns, TABLE_REV, &rev_flow(&flow, pa, pp), &[]);
                self.ops2.delete(rk);
                self.ops2.pool_free(self.pool_key, m.item as u64);
                self.c.expired += 1;
            }
            if !self.ops2.is_empty() {
                store.execute(&mut self.ops2)?;
            }
            if taken < TIMER_BATCH {
                return Ok(());
            }
        }
    }

    /// Returns the reserve to the pool (the instance stops).
    fn flush(&mut self, _ctx: &mut Ctx<'_>, store: &mut dyn StateStore) -> Result<(), NfError> {
        if self.reserve.is_empty() {
            return Ok(());
        }
        self.pass.ops.clear();
        for b in self.reserve.drain(..) {
            Self::retire(&mut self.pass.ops, self.pool_key, &b);
        }
        store.execute(&mut self.pass.ops)?;
        Ok(())
    }

    fn counters(&self, out: &mut Vec<(&'static str, u64)>) {
        let c = &self.c;
        out.extend_from_slice(&[
            ("packets", c.packets),
            ("translated_out", c.translated_out),
            ("translated_in", c.translated_in),
            ("icmp_errors_translated", c.icmp_errors_translated),
            ("new_mappings", c.new_mappings),
            ("pool_exhausted", c.pool_exhausted),
            ("no_mapping", c.no_mapping),
            ("races_lost", c.races_lost),
            ("expired", c.expired),
            ("fragments", c.fragments),
            ("encapsulated", c.encapsulated),
            ("unsupported_protocol", c.unsupported),
            ("ipv6", c.ipv6),
            ("decode_errors", c.decode_errors),
            ("rewrite_errors", c.rewrite_errors),
            ("reservations_expired", c.reservations_expired),
            (
                "reserved",
                self.reserve
                    .iter()
                    .map(|b| (b.items.len() - b.used) as u64)
                    .sum(),
            ),
        ]);
    }
}

#[cfg(test)]
mod tests;
