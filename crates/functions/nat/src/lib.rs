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
//! Per batch: one `execute` reads every mapping the batch needs (and creates the
//! pool on first use); a second writes changed mappings and allocates pool items for
//! new flows; only when there are new flows, a third writes their mappings (reverse
//! first, then a compare-and-set of the forward key against "absent", so that of two
//! instances racing on the same new flow exactly one wins), and only when such a race
//! was lost, a fourth returns the loser's item and reads the winner's mapping.
//!
//! Pool items are freed only when a mapping's timer finds it expired, so a public
//! port is reused only after its previous mapping has expired.
//!
//! IPv6 is not translated: IPv6 packets pass untouched (`ipv6: pass`, default) or
//! are dropped (`ipv6: drop`).

use rustc_hash::FxHashMap;
use serde::Deserialize;
use sluice_nf::{Batch, Ctx, NetworkFunction, NfError};
use sluice_state::{Codec, DecodeError, Key, Namespace, OpId, Ops, Reader, StateStore, Writer};
use sluice_wire::parse::{Fragment, PacketMeta, L4};
use sluice_wire::rewrite::{set_embedded_endpoint, set_endpoint, Endpoint};
use sluice_wire::tcp::flags::{FIN, RST};
use sluice_wire::{icmp, ip_proto, FlowKey, IpAddr};

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

/// Layout version of [`Mapping`].
pub const MAPPING_VERSION: u8 = 1;
/// Encoded size of [`Mapping`] in bytes.
pub const MAPPING_BYTES: usize = 20;

/// Mapping flag: the inside host sent FIN.
pub const FIN_OUT: u8 = 1;
/// Mapping flag: the outside host sent FIN.
pub const FIN_IN: u8 = 2;
/// Mapping flag: a RST was seen.
pub const RST_SEEN: u8 = 4;

/// One translation, stored identically under the forward and the reverse key.
///
/// Layout (20 bytes, little-endian): `[version=1][flags][item u32][inside addr 4]
/// [inside port u16][last_seen_ns u64]`. The public address and port follow from the
/// pool item (`address index = item / ports`, `port = first + item % ports`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    /// [`FIN_OUT`], [`FIN_IN`], [`RST_SEEN`].
    pub flags: u8,
    /// The pool item (public address and port).
    pub item: u32,
    /// The inside address.
    pub inside_addr: [u8; 4],
    /// The inside port (ICMP echo identifier).
    pub inside_port: u16,
    /// Time of the last packet that refreshed the mapping.
    pub last_seen_ns: u64,
}

impl Codec for Mapping {
    fn encode(&self, w: &mut Writer<'_>) {
        w.u8(MAPPING_VERSION)
            .u8(self.flags)
            .u32(self.item)
            .bytes(&self.inside_addr)
            .u16(self.inside_port)
            .u64(self.last_seen_ns);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        if r.u8()? != MAPPING_VERSION {
            return Err(DecodeError("nat mapping version"));
        }
        Ok(Mapping {
            flags: r.u8()?,
            item: r.u32()?,
            inside_addr: r.bytes(4)?.try_into().map_err(|_| DecodeError("addr"))?,
            inside_port: r.u16()?,
            last_seen_ns: r.u64()?,
        })
    }
}

/// Mapping timeouts, in seconds.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timeouts {
    /// TCP without FIN or RST seen. Default 7440 (RFC 5382: at least 2 h 4 min).
    pub tcp_established: u64,
    /// TCP after a RST or FINs from both sides. Default 240 (RFC 5382).
    pub tcp_transitory: u64,
    /// UDP. Default 300 (RFC 4787: at least 2 min, 5 recommended).
    pub udp: u64,
    /// ICMP echo. Default 60 (RFC 5508).
    pub icmp: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            tcp_established: 7440,
            tcp_transitory: 240,
            udp: 300,
            icmp: 60,
        }
    }
}

/// What to do with IPv6 packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Ipv6Policy {
    /// Forward untouched.
    #[default]
    Pass,
    /// Drop (reason `ipv6`).
    Drop,
}

/// NAT configuration (YAML under `type: nat`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// IPv4 prefixes whose outgoing traffic is translated, e.g. `["10.0.0.0/8"]`.
    pub inside: Vec<String>,
    /// Public IPv4 addresses and prefixes (every address of a prefix is used).
    pub pool: Vec<String>,
    /// Public port range, inclusive. Default `"1024-65535"`.
    pub ports: String,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// IPv6 handling. Default `pass`.
    pub ipv6: Ipv6Policy,
    /// A mapping's `last_seen` is rewritten at most once per this many
    /// milliseconds, so timeouts are accurate to within it. Default 1000.
    pub refresh_ms: u64,
    /// Pool items this instance takes ahead, as one block, so that most new
    /// mappings need no pool round trip (a port block, as carrier-grade NATs
    /// keep). Default 0 (allocate each new mapping's item when it is needed).
    /// A block is recorded in the store with a count of the items used, and
    /// its unused items are freed by a timer if the instance dies before using
    /// them; which public port a flow gets then depends on which instance
    /// translates it.
    pub port_reserve: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            inside: Vec::new(),
            pool: Vec::new(),
            ports: "1024-65535".into(),
            timeouts: Timeouts::default(),
            ipv6: Ipv6Policy::Pass,
            refresh_ms: 1000,
            port_reserve: 0,
        }
    }
}

/// A configuration the NAT cannot run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("nat config: {0}")]
pub struct ConfigError(pub String);

fn parse_v4_prefix(s: &str) -> Result<(u32, u32), ConfigError> {
    let (a, len) = match s.split_once('/') {
        Some((a, l)) => (
            a,
            l.parse::<u32>()
                .ok()
                .filter(|&l| l <= 32)
                .ok_or_else(|| ConfigError(format!("invalid prefix length in \"{s}\"")))?,
        ),
        None => (s, 32),
    };
    let addr: std::net::Ipv4Addr = a
        .parse()
        .map_err(|_| ConfigError(format!("invalid IPv4 address \"{s}\" (NAT is IPv4 only)")))?;
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    Ok((u32::from(addr) & mask, mask))
}

/// Builds a NAT. `_base_dir` is unused (the NAT reads no files) but kept for a
/// uniform constructor.
pub fn build(
    config: &Config,
    ns: Namespace,
    _base_dir: &std::path::Path,
) -> Result<Nat, ConfigError> {
    let inside = config
        .inside
        .iter()
        .map(|s| parse_v4_prefix(s).map_err(|e| ConfigError(format!("inside: {}", e.0))))
        .collect::<Result<Vec<_>, _>>()?;
    if inside.is_empty() {
        return Err(ConfigError("`inside` needs at least one prefix".into()));
    }
    let mut pool = Vec::new();
    for s in &config.pool {
        let (net, mask) = parse_v4_prefix(s).map_err(|e| ConfigError(format!("pool: {}", e.0)))?;
        for i in 0..=(!mask) as u64 {
            pool.push(net + i as u32);
            if pool.len() > 1 << 20 {
                return Err(ConfigError("pool: more than 2^20 addresses".into()));
            }
        }
    }
    pool.sort_unstable();
    pool.dedup();
    if pool.is_empty() {
        return Err(ConfigError("`pool` needs at least one address".into()));
    }
    let (lo, hi) = config
        .ports
        .split_once('-')
        .and_then(|(a, b)| Some((a.trim().parse::<u16>().ok()?, b.trim().parse::<u16>().ok()?)))
        .or_else(|| config.ports.trim().parse::<u16>().ok().map(|p| (p, p)))
        .filter(|(a, b)| a <= b && *a > 0)
        .ok_or_else(|| ConfigError(format!("ports: invalid range \"{}\"", config.ports)))?;
    let nports = (hi - lo) as u64 + 1;
    let items = nports * pool.len() as u64;
    if items > u32::MAX as u64 {
        return Err(ConfigError(
            "pool: more than 2^32 address-port pairs".into(),
        ));
    }
    let t = &config.timeouts;
    let s = |x: u64| x.saturating_mul(1_000_000_000);
    Ok(Nat {
        ns,
        inside,
        pool_index: pool
            .iter()
            .enumerate()
            .map(|(i, &a)| (a, i as u32))
            .collect(),
        pool,
        port_lo: lo,
        nports: nports as u32,
        items,
        pool_key: Key::new(ns, TABLE_POOL, b"pool"),
        pool_ready: false,
        ipv6: config.ipv6,
        t_est: s(t.tcp_established),
        t_trans: s(t.tcp_transitory),
        t_udp: s(t.udp),
        t_icmp: s(t.icmp),
        refresh_ns: config.refresh_ms.saturating_mul(1_000_000),
        reserve_n: config.port_reserve.min(4096) as usize,
        reserve: std::collections::VecDeque::new(),
        refill: None,
        scratch: Vec::new(),
        ops: Ops::new(),
        ops2: Ops::new(),
        slots: Vec::new(),
        slot_of: FxHashMap::default(),
        plan: Vec::new(),
        pending: Vec::new(),
        recheck: Vec::new(),
        keys: Vec::new(),
        ids: Vec::new(),
        ids2: Vec::new(),
        revs: Vec::new(),
        c: Counters::default(),
    })
}

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
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Dir {
    Out,
    In,
    OutErr,
    InErr,
}

#[derive(Clone, Copy)]
enum Plan {
    Skip,
    Do { slot: u32, dir: Dir },
}

struct Slot {
    key: Key,
    /// The flow the key was built from: the inside flow for forward slots, the
    /// outside reply flow for reverse ones.
    flow: FlowKey,
    fwd: bool,
    /// The flow's direction-invariant hash if a packet of the flow itself (not an
    /// ICMP error about it, which the data plane may steer elsewhere) uses the
    /// record: only then may a flow cache hold it.
    hash: Option<u32>,
    get: OpId,
    /// The record as read (compare-and-set expectation).
    old: Option<Mapping>,
    cur: Option<Mapping>,
    dirty: bool,
    /// Flags changed: the write goes to the store before the batch leaves.
    through: bool,
    /// A read of the other direction's record (its own one looked expired).
    other: Option<OpId>,
    alloc: Option<OpId>,
    /// An item taken from the reserve instead of `alloc`.
    pre: Option<u32>,
    item: Option<u32>,
    cas: Option<OpId>,
    reread: Option<OpId>,
}

/// Pool items taken ahead in one [`Ops::pool_take`] (see `Config::port_reserve`).
struct Block {
    /// The block's record (`TABLE_RESV`, keyed by its first item).
    key: Key,
    items: Vec<u32>,
    /// Items handed out, in order.
    used: usize,
    /// `used` as last written to the store.
    marked: usize,
    /// When the block was taken.
    at: u64,
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
    ops: Ops,
    ops2: Ops,
    slots: Vec<Slot>,
    slot_of: FxHashMap<Key, u32>,
    plan: Vec<Plan>,
    pending: Vec<u32>,
    /// Packets whose own record looked expired: decided with the other record.
    recheck: Vec<u32>,
    keys: Vec<Key>,
    ids: Vec<Option<OpId>>,
    ids2: Vec<Option<(OpId, Mapping)>>,
    revs: Vec<Option<(OpId, Mapping)>>,
    c: Counters,
}

/// The reply flow of an inside flow translated to `(pub_addr, pub_port)`.
fn rev_flow(fwd: &FlowKey, pub_addr: [u8; 4], pub_port: u16) -> FlowKey {
    let echo = matches!(fwd.proto, ip_proto::ICMP);
    FlowKey {
        src: fwd.dst,
        dst: IpAddr::V4(pub_addr),
        src_port: if echo { pub_port } else { fwd.dst_port },
        dst_port: pub_port,
        proto: fwd.proto,
    }
}

/// The inside flow of a reply flow whose mapping is `m`.
fn fwd_flow(rev: &FlowKey, m: &Mapping) -> FlowKey {
    let echo = matches!(rev.proto, ip_proto::ICMP);
    FlowKey {
        src: IpAddr::V4(m.inside_addr),
        dst: rev.src,
        src_port: m.inside_port,
        dst_port: if echo { m.inside_port } else { rev.src_port },
        proto: rev.proto,
    }
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

    /// Frees the unused items of the blocks whose timers were taken (their
    /// owner died, or kept them past half their life, after which it never
    /// uses them) and removes those keys from `self.keys`. A block's record
    /// still present means its owner did not retire it; the items past its
    /// used count were never handed out (the count is written before the
    /// mappings that hold the items).
    fn free_unused_reservations(&mut self, store: &mut dyn StateStore) -> Result<(), NfError> {
        if !self.keys.iter().any(|k| k.table() == TABLE_RESV) {
            return Ok(());
        }
        self.ops.clear();
        self.ids.clear();
        for k in self.keys.iter().filter(|k| k.table() == TABLE_RESV) {
            self.ids.push(Some(self.ops.get(*k)));
            self.ids.push(Some(self.ops.get(used_key(k))));
        }
        store.execute(&mut self.ops)?;
        self.ops2.clear();
        let resv = self.keys.iter().filter(|k| k.table() == TABLE_RESV);
        for (k, g) in resv.zip(self.ids.chunks_exact(2)) {
            let (Some(block), Some(used)) = (g[0], g[1]) else {
                continue;
            };
            let Some(items) = self.ops.value(block) else {
                continue;
            };
            let used = self
                .ops
                .value(used)
                .and_then(|v| v.try_into().ok())
                .map_or(0, |v| u32::from_be_bytes(v) as usize);
            for item in items.chunks_exact(4).skip(used) {
                let item = u32::from_be_bytes(item.try_into().expect("chunks of 4"));
                self.ops2.pool_free(self.pool_key, item as u64);
                self.c.reservations_expired += 1;
            }
            self.ops2.delete(*k);
            self.ops2.delete(used_key(k));
        }
        if !self.ops2.is_empty() {
            store.execute(&mut self.ops2)?;
        }
        self.keys.retain(|k| k.table() != TABLE_RESV);
        Ok(())
    }

    /// Returns a block's unused items to the pool and forgets it.
    fn retire(ops: &mut Ops, pool_key: Key, b: &Block) {
        for &item in &b.items[b.used..] {
            ops.pool_free(pool_key, item as u64);
        }
        ops.delete(b.key);
        ops.delete(used_key(&b.key));
        ops.cancel_timer(b.key);
    }

    /// The next reserved item young enough to be surely ours (its block's
    /// timer frees what is unused after `RESERVE_TTL_NS`), retiring blocks used
    /// up or too old on the way.
    fn take_reserved(&mut self, now: u64, ops: &mut Ops) -> Option<u32> {
        while let Some(b) = self.reserve.front_mut() {
            if b.used < b.items.len() && now < b.at.saturating_add(RESERVE_TTL_NS / 2) {
                let item = b.items[b.used];
                b.used += 1;
                return Some(item);
            }
            let b = self.reserve.pop_front().expect("front exists");
            Self::retire(ops, self.pool_key, &b);
        }
        None
    }

    /// Writes the used count of every block that handed out items since it was
    /// last written: before the mappings that hold them, so a timer never
    /// frees an item a mapping holds.
    fn mark_used(&mut self, ops: &mut Ops) {
        for b in self.reserve.iter_mut().filter(|b| b.used != b.marked) {
            ops.put(used_key(&b.key), &(b.used as u32).to_be_bytes());
            b.marked = b.used;
        }
    }

    /// The key of the other direction's record of mapping `m` read under `s`.
    fn other_key(&self, s: &Slot, m: &Mapping) -> Key {
        if s.fwd {
            let (pa, pp) = self.public_of(m.item);
            Key::flow(self.ns, TABLE_REV, &rev_flow(&s.flow, pa, pp), &[])
        } else {
            Key::flow(self.ns, TABLE_FWD, &fwd_flow(&s.flow, m), &[])
        }
    }

    fn slot_for(&mut self, flow: FlowKey, fwd: bool, own: bool) -> u32 {
        let key = Key::flow(self.ns, if fwd { TABLE_FWD } else { TABLE_REV }, &flow, &[]);
        let s = self.slots.len() as u32;
        match self.slot_of.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => {
                let s = *e.get();
                let slot = &mut self.slots[s as usize];
                if own && slot.hash.is_none() {
                    slot.hash = Some(flow.symmetric_hash());
                }
                return s;
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(s);
            }
        }
        let hash = own.then(|| flow.symmetric_hash());
        // Forward records are created only by the owner of the inside flow, so
        // their absence may be cached; a reverse record is created by whichever
        // instance owns the inside flow, so only its presence may be.
        let get = match hash {
            Some(h) if fwd => self.ops.get_owned(key, h),
            Some(h) => self.ops.get_present(key, h),
            None => self.ops.get(key),
        };
        self.slots.push(Slot {
            key,
            flow,
            fwd,
            hash,
            get,
            old: None,
            cur: None,
            dirty: false,
            through: false,
            other: None,
            alloc: None,
            pre: None,
            item: None,
            cas: None,
            reread: None,
        });
        s
    }

    fn has_ports(m: &PacketMeta) -> bool {
        match m.l4 {
            L4::Tcp | L4::Udp => true,
            L4::Icmp => {
                m.icmp_type == icmp::v4::ECHO_REQUEST || m.icmp_type == icmp::v4::ECHO_REPLY
            }
            _ => false,
        }
    }

    fn classify(&mut self, m: &PacketMeta) -> Result<Plan, &'static str> {
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
                    slot: self.slot_for(f, false, false),
                    dir: Dir::InErr,
                }
            } else {
                Plan::Do {
                    slot: self.slot_for(f, true, false),
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
                slot: self.slot_for(m.flow, false, true),
                dir: Dir::In,
            }
        } else {
            Plan::Do {
                slot: self.slot_for(m.flow, true, true),
                dir: Dir::Out,
            }
        })
    }

    /// Rewrites a packet with mapping `mp`. `Err` only on a rewrite failure.
    fn translate(
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
    fn queue_write(ops: &mut Ops, nat: &Nat, s: &Slot) {
        let (Some(old), Some(new)) = (s.old, s.cur) else {
            return;
        };
        let half = nat.min_timeout(s.flow.proto) / 2;
        let young = new.last_seen_ns < old.last_seen_ns.saturating_add(half);
        match s.hash {
            Some(h) if young && !s.through => ops.put_value_deferred(s.key, &new, h),
            Some(h) if young => ops.put_value_owned(s.key, &new, h),
            Some(h) => ops.compare_and_set_owned(s.key, Some(&old), Some(&new), h),
            None => ops.compare_and_set(s.key, Some(&old), Some(&new)),
        };
    }

    /// Applies a packet of direction `dir` to the record of slot `si` (flags,
    /// refresh) and returns the mapping to translate with.
    fn touch(
        &mut self,
        si: usize,
        dir: Dir,
        mut mp: Mapping,
        meta: &PacketMeta,
        now: u64,
    ) -> Mapping {
        if !matches!(dir, Dir::Out | Dir::In) {
            return mp;
        }
        let s = &self.slots[si];
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
            let s = &mut self.slots[si];
            s.through |= mp.flags != c.flags;
            s.cur = Some(mp);
            s.dirty = true;
        }
        mp
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
        for p in batch.pkts.iter().filter(|p| p.is_live() && p.meta.is_ip()) {
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
        self.ops.clear();
        self.slots.clear();
        self.slot_of.clear();
        self.plan.clear();
        self.pending.clear();
        if !self.pool_ready {
            self.ops.pool_init(self.pool_key, self.items);
        }
        for p in batch.pkts.iter_mut() {
            let plan = if !p.is_live() || !p.meta.is_ip() {
                Plan::Skip
            } else {
                self.c.packets += 1;
                match self.classify(&p.meta) {
                    Ok(pl) => pl,
                    Err(r) => {
                        p.drop_by(ctx.stage, r);
                        Plan::Skip
                    }
                }
            };
            self.plan.push(plan);
        }
        if self.slots.is_empty() && self.pool_ready {
            return Ok(());
        }
        store.execute(&mut self.ops)?;
        self.pool_ready = true;
        for i in 0..self.slots.len() {
            let v = match self.ops.decode::<Mapping>(self.slots[i].get) {
                Ok(v) => v,
                Err(_) => {
                    self.c.decode_errors += 1;
                    None
                }
            };
            let s = &mut self.slots[i];
            s.old = v;
            s.cur = v;
        }

        // Each direction of a connection reads and writes only its own record (the
        // forward one keyed by the inside flow, the reverse one by the reply flow),
        // so each record has one writer: the owner of its flow's hash.
        let mut ops = std::mem::take(&mut self.ops);
        ops.clear();
        self.recheck.clear();
        for i in 0..batch.pkts.len() {
            let Plan::Do { slot, dir } = self.plan[i] else {
                continue;
            };
            let p = &mut batch.pkts[i];
            let now = p.ts_ns;
            let si = slot as usize;
            let proto = self.slots[si].flow.proto;
            let Some(cur) = self.slots[si].cur else {
                if dir == Dir::Out {
                    self.pending.push(i as u32);
                } else {
                    self.c.no_mapping += 1;
                    p.drop_by(ctx.stage, "no_mapping");
                }
                continue;
            };
            // An outbound flow keeps its mapping even if it idled past its timeout
            // before the timer reclaimed it: same inside flow, same public port.
            if dir != Dir::Out && !self.alive_alone(proto, &cur, now) {
                // Maybe only the other direction kept it alive: ask its record.
                if self.slots[si].other.is_none() {
                    let k = self.other_key(&self.slots[si], &cur);
                    self.slots[si].other = Some(ops.get(k));
                }
                self.recheck.push(i as u32);
                continue;
            }
            let mp = self.touch(si, dir, cur, &p.meta, now);
            let (frame, meta) = p.data_and_meta_mut();
            if self.translate(frame, meta, dir, &mp).is_err() {
                self.c.rewrite_errors += 1;
                p.drop_by(ctx.stage, "rewrite_error");
            }
        }

        // Round trip 2: reads of other records, allocations for new flows, and
        // writes of changed records not waiting for a recheck.
        let now = ctx.now_ns;
        let mut short = false;
        self.refill = None;
        for k in 0..self.pending.len() {
            let Plan::Do { slot, .. } = self.plan[self.pending[k] as usize] else {
                continue;
            };
            let si = slot as usize;
            if self.slots[si].alloc.is_some() || self.slots[si].pre.is_some() {
                continue;
            }
            let pre = self.take_reserved(now, &mut ops);
            let s = &mut self.slots[si];
            s.pre = pre;
            if pre.is_none() {
                s.alloc = Some(ops.pool_alloc(self.pool_key));
                short = true;
            }
        }
        self.mark_used(&mut ops);
        if short && self.reserve_n > 0 {
            // Taken ahead in the round trip that waits anyway.
            self.refill = Some(ops.pool_take(self.pool_key, self.reserve_n as u32));
        }
        for s in &self.slots {
            if s.dirty && s.other.is_none() {
                Self::queue_write(&mut ops, self, s);
            }
        }
        let r = store.execute(&mut ops);
        self.ops = ops;
        r?;

        self.ops2.clear();
        for k in 0..self.recheck.len() {
            let i = self.recheck[k] as usize;
            let Plan::Do { slot, dir } = self.plan[i] else {
                continue;
            };
            let si = slot as usize;
            let s = &self.slots[si];
            let proto = s.flow.proto;
            let other = match s.other.map(|g| self.ops.decode::<Mapping>(g)) {
                Some(Ok(v)) => v,
                _ => None,
            };
            let p = &mut batch.pkts[i];
            let now = p.ts_ns;
            let merged = s.cur.and_then(|c| Self::merged(&c, other.as_ref()));
            let Some(m) = merged.filter(|m| other.is_some() && self.alive(proto, m, now)) else {
                self.c.no_mapping += 1;
                p.drop_by(ctx.stage, "no_mapping");
                continue;
            };
            let mp = self.touch(si, dir, m, &p.meta, now);
            let (frame, meta) = p.data_and_meta_mut();
            if self.translate(frame, meta, dir, &mp).is_err() {
                self.c.rewrite_errors += 1;
                p.drop_by(ctx.stage, "rewrite_error");
            }
        }
        let mut ops2 = std::mem::take(&mut self.ops2);
        for s in &self.slots {
            if s.dirty && s.other.is_some() {
                Self::queue_write(&mut ops2, self, s);
            }
        }
        self.ops2 = ops2;

        // The reserve's new block, recorded in the store (its unused items
        // freed by its timer if this instance dies before using them).
        if let Some(t) = self.refill {
            self.scratch.clear();
            let mut items = Vec::with_capacity(self.reserve_n);
            for item in self.ops.taken(t).filter_map(|x| u32::try_from(x).ok()) {
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

        // Round trip 3 (with the rechecked writes): new mappings, reverse record
        // first, then the forward one claimed only if still absent.
        for si in 0..self.slots.len() {
            let allocated = |a: OpId| self.ops.allocated(a).and_then(|x| u32::try_from(x).ok());
            let item = match (self.slots[si].pre, self.slots[si].alloc) {
                (Some(item), _) => item,
                (None, Some(a)) => match allocated(a) {
                    Some(item) => item,
                    None => continue,
                },
                (None, None) => continue,
            };
            let s = &self.slots[si];
            let (pa, pp) = self.public_of(item);
            let (IpAddr::V4(ia), ip) = (s.flow.src, s.flow.src_port) else {
                continue;
            };
            let m = Mapping {
                flags: 0,
                item,
                inside_addr: ia,
                inside_port: ip,
                last_seen_ns: now,
            };
            let rf = rev_flow(&s.flow, pa, pp);
            let rk = Key::flow(self.ns, TABLE_REV, &rf, &[]);
            // Cached here only if this instance also owns the reply flow.
            self.ops2.put_value_owned(rk, &m, rf.symmetric_hash());
            let cas = match s.hash {
                Some(h) => self.ops2.compare_and_set_owned(s.key, None, Some(&m), h),
                None => self.ops2.compare_and_set(s.key, None, Some(&m)),
            };
            self.ops2
                .arm_timer(s.key, now.saturating_add(self.timeout(s.flow.proto, 0)));
            let s = &mut self.slots[si];
            s.item = Some(item);
            s.cas = Some(cas);
            s.cur = Some(m);
        }
        if !self.ops2.is_empty() {
            store.execute(&mut self.ops2)?;
        }
        if self.pending.is_empty() {
            return Ok(());
        }

        // Round trip 4, only after a lost race: undo ours, adopt the winner's.
        self.ops.clear();
        for si in 0..self.slots.len() {
            let s = &self.slots[si];
            let (Some(cas), Some(item)) = (s.cas, s.item) else {
                continue;
            };
            if self.ops2.swapped(cas) {
                self.c.new_mappings += 1;
                continue;
            }
            self.c.races_lost += 1;
            let (pa, pp) = self.public_of(item);
            let rk = Key::flow(self.ns, TABLE_REV, &rev_flow(&s.flow, pa, pp), &[]);
            let key = s.key;
            self.ops.delete(rk);
            self.ops.pool_free(self.pool_key, item as u64);
            let g = self.ops.get(key);
            let s = &mut self.slots[si];
            s.reread = Some(g);
            s.cur = None;
        }
        if !self.ops.is_empty() {
            store.execute(&mut self.ops)?;
            for s in self.slots.iter_mut() {
                if let Some(g) = s.reread {
                    s.cur = self.ops.decode::<Mapping>(g).ok().flatten();
                }
            }
        }
        for k in 0..self.pending.len() {
            let i = self.pending[k] as usize;
            let Plan::Do { slot, dir } = self.plan[i] else {
                continue;
            };
            let s = &self.slots[slot as usize];
            let p = &mut batch.pkts[i];
            match s.cur {
                Some(mp) => {
                    let (frame, meta) = p.data_and_meta_mut();
                    if self.translate(frame, meta, dir, &mp).is_err() {
                        self.c.rewrite_errors += 1;
                        p.drop_by(ctx.stage, "rewrite_error");
                    }
                }
                None if s.alloc.is_some() && s.item.is_none() => {
                    self.c.pool_exhausted += 1;
                    p.drop_by(ctx.stage, "pool_exhausted");
                }
                None => {
                    self.c.no_mapping += 1;
                    p.drop_by(ctx.stage, "no_mapping");
                }
            }
        }
        Ok(())
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
            self.ops.clear();
            self.ids.clear();
            for &k in &self.keys {
                self.ids.push(Some(self.ops.get(k)));
            }
            store.execute(&mut self.ops)?;
            // The reverse records of the forward ones read.
            self.ops2.clear();
            self.revs.clear();
            for (n, &k) in self.keys.iter().enumerate() {
                let mut entry = None;
                if let (Some(g), Some(flow)) = (self.ids[n], k.flow_key()) {
                    match self.ops.decode::<Mapping>(g) {
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
            self.ops.clear();
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
                            self.ops.arm_timer(k, d);
                        } else {
                            entry = Some((self.ops.compare_and_set(k, Some(&m), None), m));
                        }
                    }
                    (None, None, _) if k.flow_key().is_some() => {
                        // Undecodable forward record.
                        self.c.decode_errors += 1;
                        self.ops.delete(k);
                    }
                    _ => {}
                }
                self.ids2.push(entry);
            }
            store.execute(&mut self.ops)?;
            // The reverse record and the pool item go only with a forward record we
            // removed; one a packet revived meanwhile is checked again later.
            self.ops2.clear();
            for (k, e) in self.keys.iter().zip(&self.ids2) {
                let (Some((cas, m)), Some(flow)) = (e, k.flow_key()) else {
                    continue;
                };
                if !self.ops.swapped(*cas) {
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
        self.ops.clear();
        for b in self.reserve.drain(..) {
            Self::retire(&mut self.ops, self.pool_key, &b);
        }
        store.execute(&mut self.ops)?;
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

/// The used-count record of the block recorded under `block`.
fn used_key(block: &Key) -> Key {
    Key::new(block.namespace(), TABLE_RESV_USED, block.payload())
}

#[cfg(test)]
mod tests;
