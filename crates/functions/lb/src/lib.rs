//! The L4 load balancer (StatelessNF Algorithm 1).
//!
//! Virtual services (VIP, port, protocol) each front a weighted pool of backends.
//! A new connection (TCP SYN, or any UDP datagram without state) gets a backend by
//! `maglev` consistent hashing ([`maglev`]) or by weighted `least_connections`
//! (backend loads are store counters changed only with atomic `incr`). The choice is
//! stored per connection under the canonical key of the client-VIP flow (14-byte
//! [`Conn`]), so every later packet, in either direction and on any instance, goes
//! to the same backend. Inbound packets get their destination rewritten VIP ->
//! backend; replies from the backend get their source rewritten backend -> VIP.
//!
//! Per batch: one `execute` reads the connections of the batch; one more writes
//! changed records and claims new connections (compare-and-set against the value
//! read, so instances racing on one new connection agree on one backend), plus
//! one in between for `least_connections` services with new connections (reading
//! loads). Established packets: one batched read, no write except on FIN/RST or a
//! `last_seen` refresh (at most once per `refresh_ms`).
//!
//! A return path is recognised by its source (backend address, port, protocol), so a
//! backend endpoint may belong to one service only (checked at configuration).

pub mod maglev;

use rustc_hash::FxHashMap;
use serde::Deserialize;
use sluice_nf::{Batch, Ctx, NetworkFunction, NfError};
use sluice_state::{Codec, DecodeError, Key, Namespace, OpId, Ops, Reader, StateStore, Writer};
use sluice_wire::parse::{Fragment, PacketMeta, L4};
use sluice_wire::rewrite::{set_endpoint, Endpoint};
use sluice_wire::tcp::flags::{ACK, FIN, RST, SYN};
use sluice_wire::{ip_proto, FlowKey, IpAddr};

const TABLE_CONN: u8 = 1;
const TABLE_LOAD: u8 = 2;
const TIMER_BATCH: usize = 1024;

/// Layout version of [`Conn`].
pub const CONN_VERSION: u8 = 1;
/// Encoded size of [`Conn`] in bytes.
pub const CONN_BYTES: usize = 14;

/// Connection flag: the client sent FIN.
pub const FIN_CLIENT: u8 = 1;
/// Connection flag: the backend sent FIN.
pub const FIN_SERVER: u8 = 2;
/// Connection flag: a RST was seen.
pub const RST_SEEN: u8 = 4;

/// One balanced connection.
///
/// Layout (14 bytes, little-endian): `[version=1][flags][service u16][backend u16]
/// [last_seen_ns u64]`; service and backend are indices in configuration order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conn {
    /// [`FIN_CLIENT`], [`FIN_SERVER`], [`RST_SEEN`].
    pub flags: u8,
    /// Service index.
    pub service: u16,
    /// Backend index within the service.
    pub backend: u16,
    /// Time of the last packet that refreshed the record.
    pub last_seen_ns: u64,
}

impl Conn {
    fn closing(&self) -> bool {
        self.flags & RST_SEEN != 0
            || self.flags & (FIN_CLIENT | FIN_SERVER) == FIN_CLIENT | FIN_SERVER
    }
}

impl Codec for Conn {
    fn encode(&self, w: &mut Writer<'_>) {
        w.u8(CONN_VERSION)
            .u8(self.flags)
            .u16(self.service)
            .u16(self.backend)
            .u64(self.last_seen_ns);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        if r.u8()? != CONN_VERSION {
            return Err(DecodeError("lb connection version"));
        }
        Ok(Conn {
            flags: r.u8()?,
            service: r.u16()?,
            backend: r.u16()?,
            last_seen_ns: r.u64()?,
        })
    }
}

/// Transport of a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Proto {
    /// TCP (default).
    #[default]
    Tcp,
    /// UDP.
    Udp,
}

/// How new connections pick a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    /// Maglev consistent hashing of the client flow (default).
    #[default]
    Maglev,
    /// Fewest open connections relative to weight.
    LeastConnections,
}

/// One backend.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    /// `addr` or `addr:port` (`[v6]:port`); the port defaults to the service's.
    pub addr: String,
    /// Relative weight. Default 1; 0 takes no new connections.
    #[serde(default = "one")]
    pub weight: u32,
    /// Start draining: no new connections, existing ones continue. Default false.
    #[serde(default)]
    pub drain: bool,
}

fn one() -> u32 {
    1
}

/// One virtual service.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceConfig {
    /// Virtual IP.
    pub vip: String,
    /// Virtual port.
    pub port: u16,
    /// Transport. Default tcp.
    #[serde(default)]
    pub proto: Proto,
    /// Backend choice. Default maglev.
    #[serde(default)]
    pub algorithm: Algorithm,
    /// Maglev table size, a prime. Default 65537.
    #[serde(default = "table_size")]
    pub table_size: usize,
    /// The backends.
    pub backends: Vec<BackendConfig>,
}

fn table_size() -> usize {
    maglev::DEFAULT_TABLE_SIZE
}

/// Connection timeouts, in seconds.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timeouts {
    /// TCP idle timeout. Default 3600.
    pub tcp: u64,
    /// After FINs both ways or a RST, before the assignment is removed (lets the
    /// last ACKs through). Default 10.
    pub tcp_closing: u64,
    /// UDP idle timeout. Default 30.
    pub udp: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            tcp: 3600,
            tcp_closing: 10,
            udp: 30,
        }
    }
}

/// Load-balancer configuration (YAML under `type: lb`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The virtual services.
    pub services: Vec<ServiceConfig>,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// `last_seen` is rewritten at most once per this many milliseconds per
    /// connection. Default 1000.
    pub refresh_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            services: Vec::new(),
            timeouts: Timeouts::default(),
            refresh_ms: 1000,
        }
    }
}

/// A configuration the load balancer cannot run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("lb config: {0}")]
pub struct ConfigError(pub String);

struct Backend {
    addr: IpAddr,
    port: u16,
    weight: u32,
    drain: bool,
    load_key: Key,
}

struct Service {
    vip: IpAddr,
    port: u16,
    proto: u8,
    algorithm: Algorithm,
    table_size: usize,
    names: Vec<String>,
    backends: Vec<Backend>,
    table: Vec<u16>,
}

impl Service {
    fn rebuild(&mut self) {
        if self.algorithm == Algorithm::Maglev {
            let w: Vec<u32> = self.backends.iter().map(|b| b.weight).collect();
            let el: Vec<bool> = self.backends.iter().map(|b| !b.drain).collect();
            self.table = maglev::build_table(&self.names, &w, &el, self.table_size);
        }
    }
}

fn parse_backend(s: &str, default_port: u16) -> Result<(IpAddr, u16), ConfigError> {
    if let Ok(a) = s.parse::<std::net::IpAddr>() {
        return Ok((a.into(), default_port));
    }
    s.parse::<std::net::SocketAddr>()
        .map(|sa| (sa.ip().into(), sa.port()))
        .map_err(|_| ConfigError(format!("invalid backend address \"{s}\"")))
}

/// Builds a load balancer. `_base_dir` is unused (no files) but kept for a
/// uniform constructor.
pub fn build(
    config: &Config,
    ns: Namespace,
    _base_dir: &std::path::Path,
) -> Result<Lb, ConfigError> {
    if config.services.is_empty() {
        return Err(ConfigError("at least one service is required".into()));
    }
    let mut services = Vec::new();
    let mut vips = FxHashMap::default();
    let mut backs = FxHashMap::default();
    for (si, sc) in config.services.iter().enumerate() {
        let vip: IpAddr = sc
            .vip
            .parse::<std::net::IpAddr>()
            .map_err(|_| ConfigError(format!("invalid vip \"{}\"", sc.vip)))?
            .into();
        let proto = match sc.proto {
            Proto::Tcp => ip_proto::TCP,
            Proto::Udp => ip_proto::UDP,
        };
        let what = format!("{}:{}/{:?}", sc.vip, sc.port, sc.proto).to_lowercase();
        if vips.insert((vip, sc.port, proto), si as u16).is_some() {
            return Err(ConfigError(format!("service {what} defined twice")));
        }
        if sc.backends.is_empty() || sc.backends.len() >= u16::MAX as usize {
            return Err(ConfigError(format!(
                "service {what} needs 1 to 65534 backends"
            )));
        }
        if sc.algorithm == Algorithm::Maglev
            && (!maglev::is_prime(sc.table_size) || sc.table_size < sc.backends.len())
        {
            return Err(ConfigError(format!(
                "service {what}: table_size {} must be a prime at least the number of backends",
                sc.table_size
            )));
        }
        let mut svc = Service {
            vip,
            port: sc.port,
            proto,
            algorithm: sc.algorithm,
            table_size: sc.table_size,
            names: Vec::new(),
            backends: Vec::new(),
            table: Vec::new(),
        };
        for (bi, bc) in sc.backends.iter().enumerate() {
            let (addr, port) = parse_backend(&bc.addr, sc.port)?;
            if addr.is_v4() != vip.is_v4() {
                return Err(ConfigError(format!(
                    "backend \"{}\" of service {what}: address family differs from the vip",
                    bc.addr
                )));
            }
            if backs
                .insert((addr, port, proto), (si as u16, bi as u16))
                .is_some()
            {
                return Err(ConfigError(format!(
                    "backend \"{}\" appears twice (its replies would be ambiguous)",
                    bc.addr
                )));
            }
            let mut kb = [0u8; 4];
            kb[..2].copy_from_slice(&(si as u16).to_be_bytes());
            kb[2..].copy_from_slice(&(bi as u16).to_be_bytes());
            svc.names.push(format!("{addr}:{port}"));
            svc.backends.push(Backend {
                addr,
                port,
                weight: bc.weight,
                drain: bc.drain,
                load_key: Key::new(ns, TABLE_LOAD, &kb),
            });
        }
        svc.rebuild();
        services.push(svc);
    }
    let s = |x: u64| x.saturating_mul(1_000_000_000);
    Ok(Lb {
        ns,
        services,
        vips,
        backs,
        t_tcp: s(config.timeouts.tcp),
        t_closing: s(config.timeouts.tcp_closing),
        t_udp: s(config.timeouts.udp),
        refresh_ns: config.refresh_ms.saturating_mul(1_000_000),
        ops: Ops::new(),
        ops2: Ops::new(),
        slots: Vec::new(),
        slot_of: FxHashMap::default(),
        plan: Vec::new(),
        pending: Vec::new(),
        loads: Vec::new(),
        keys: Vec::new(),
        gets: Vec::new(),
        ids: Vec::new(),
        c: Counters::default(),
    })
}

#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    packets: u64,
    new_connections: u64,
    to_backend: u64,
    to_client: u64,
    no_state: u64,
    no_backend: u64,
    closed: u64,
    races_lost: u64,
    fragments: u64,
    decode_errors: u64,
    rewrite_errors: u64,
}

#[derive(Clone, Copy)]
enum Plan {
    Skip,
    /// Client to VIP.
    In {
        slot: u32,
    },
    /// Backend `backend` to client.
    Out {
        slot: u32,
        backend: u16,
    },
}

struct Slot {
    key: Key,
    service: u16,
    /// Hash of the client flow, for Maglev.
    hash: u32,
    get: OpId,
    /// The record as read (compare-and-set expectation).
    old: Option<Conn>,
    cur: Option<Conn>,
    dirty: bool,
    rearm: bool,
    /// A new connection is being claimed in this batch.
    new: bool,
    cas: Option<OpId>,
    reread: Option<OpId>,
}

/// The load balancer. See the crate documentation.
pub struct Lb {
    ns: Namespace,
    services: Vec<Service>,
    vips: FxHashMap<(IpAddr, u16, u8), u16>,
    backs: FxHashMap<(IpAddr, u16, u8), (u16, u16)>,
    t_tcp: u64,
    t_closing: u64,
    t_udp: u64,
    refresh_ns: u64,
    ops: Ops,
    ops2: Ops,
    slots: Vec<Slot>,
    slot_of: FxHashMap<Key, u32>,
    plan: Vec<Plan>,
    pending: Vec<u32>,
    /// Per service, per backend: (load counter op, load as seen plus this batch's picks).
    loads: Vec<Vec<(Option<OpId>, i64)>>,
    keys: Vec<Key>,
    gets: Vec<OpId>,
    ids: Vec<Option<(OpId, Conn)>>,
    c: Counters,
}

impl Lb {
    /// Starts or stops draining every backend with address `addr` (in every
    /// service): a draining backend gets no new connections, its existing ones
    /// continue. Returns how many backends matched. Each instance holds its own
    /// copy of this flag: apply it to every instance (as a configuration change).
    pub fn set_drain(&mut self, addr: IpAddr, drain: bool) -> usize {
        let mut n = 0;
        for s in &mut self.services {
            let mut hit = false;
            for b in &mut s.backends {
                if b.addr == addr {
                    b.drain = drain;
                    hit = true;
                    n += 1;
                }
            }
            if hit {
                s.rebuild();
            }
        }
        n
    }

    /// The store key of the load counter of backend `backend` of service `service`.
    pub fn load_key(&self, service: usize, backend: usize) -> Option<Key> {
        Some(self.services.get(service)?.backends.get(backend)?.load_key)
    }

    fn timeout(&self, proto: u8, c: &Conn) -> u64 {
        if proto == ip_proto::UDP {
            self.t_udp
        } else if c.closing() {
            self.t_closing
        } else {
            self.t_tcp
        }
    }

    #[inline]
    fn alive(&self, c: &Conn, now: u64) -> bool {
        let Some(s) = self.services.get(c.service as usize) else {
            return false;
        };
        (c.backend as usize) < s.backends.len()
            && now < c.last_seen_ns.saturating_add(self.timeout(s.proto, c))
    }

    fn slot_for(&mut self, client_flow: &FlowKey, service: u16) -> u32 {
        let key = Key::flow(self.ns, TABLE_CONN, &client_flow.canonical().0, &[]);
        let s = self.slots.len() as u32;
        match self.slot_of.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => return *e.get(),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(s);
            }
        }
        let get = self.ops.get(key);
        self.slots.push(Slot {
            key,
            service,
            hash: client_flow.directional_hash(),
            get,
            old: None,
            cur: None,
            dirty: false,
            rearm: false,
            new: false,
            cas: None,
            reread: None,
        });
        s
    }

    fn classify(&mut self, m: &PacketMeta) -> Result<Plan, &'static str> {
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
                slot: self.slot_for(f, svc),
            });
        }
        if let Some(&(svc, backend)) = self.backs.get(&(f.src, f.src_port, f.proto)) {
            let s = &self.services[svc as usize];
            let client = FlowKey {
                src: f.dst,
                dst: s.vip,
                src_port: f.dst_port,
                dst_port: s.port,
                proto: f.proto,
            };
            return Ok(Plan::Out {
                slot: self.slot_for(&client, svc),
                backend,
            });
        }
        Ok(Plan::Skip)
    }

    /// Picks a backend for a new connection of `slot`, `None` if none is eligible.
    fn choose(&mut self, slot: usize) -> Option<u16> {
        let svc = self.slots[slot].service as usize;
        let s = &self.services[svc];
        match s.algorithm {
            Algorithm::Maglev => {
                let b = *s
                    .table
                    .get(self.slots[slot].hash as usize % s.table.len().max(1))?;
                (b != u16::MAX).then_some(b)
            }
            Algorithm::LeastConnections => {
                let loads = &mut self.loads[svc];
                let mut best: Option<(usize, i64, u64)> = None;
                for (i, b) in s.backends.iter().enumerate() {
                    if b.drain || b.weight == 0 {
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

    fn rewrite(
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

impl NetworkFunction for Lb {
    fn kind(&self) -> &'static str {
        "lb"
    }

    fn namespace(&self) -> Namespace {
        self.ns
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
        if self.slots.is_empty() {
            return Ok(());
        }
        store.execute(&mut self.ops)?;
        for i in 0..self.slots.len() {
            let v = match self.ops.decode::<Conn>(self.slots[i].get) {
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

        let mut need_loads = false;
        for i in 0..batch.pkts.len() {
            let plan = self.plan[i];
            let (slot, inbound) = match plan {
                Plan::Skip => continue,
                Plan::In { slot } => (slot as usize, true),
                Plan::Out { slot, .. } => (slot as usize, false),
            };
            let p = &mut batch.pkts[i];
            let now = p.ts_ns;
            let m = &p.meta;
            if self.slots[slot].new {
                self.pending.push(i as u32);
                continue;
            }
            let cur = self.slots[slot].cur.filter(|c| self.alive(c, now));
            let tcp = m.l4 == L4::Tcp;
            let syn = tcp && m.tcp_flags & (SYN | ACK | RST) == SYN;
            match cur {
                // A new SYN on a closing connection's 4-tuple is a new connection.
                Some(c) if !(syn && inbound && c.closing()) => {
                    let mut n = c;
                    if tcp {
                        if m.tcp_flags & RST != 0 {
                            n.flags |= RST_SEEN;
                        }
                        if m.tcp_flags & FIN != 0 {
                            n.flags |= if inbound { FIN_CLIENT } else { FIN_SERVER };
                        }
                    }
                    if n.flags != c.flags || now.saturating_sub(c.last_seen_ns) >= self.refresh_ns {
                        n.last_seen_ns = now.max(c.last_seen_ns);
                        let s = &mut self.slots[slot];
                        s.rearm |= n.closing() != c.closing();
                        s.cur = Some(n);
                        s.dirty = true;
                    }
                    let (frame, meta) = p.data_and_meta_mut();
                    if let Err(r) = self.rewrite(frame, meta, plan, &n) {
                        p.drop_by(ctx.stage, r);
                    }
                }
                _ => {
                    if !inbound || (tcp && !syn) {
                        self.c.no_state += 1;
                        p.drop_by(ctx.stage, "no_state");
                        continue;
                    }
                    let s = &mut self.slots[slot];
                    s.new = true;
                    let svc = s.service as usize;
                    need_loads |= self.services[svc].algorithm == Algorithm::LeastConnections;
                    self.pending.push(i as u32);
                }
            }
        }

        // Writes of changed records; conditional on the value read, so that a record
        // a timer just removed (and whose load it decremented) is not resurrected.
        let mut ops = std::mem::take(&mut self.ops);
        ops.clear();
        for s in &self.slots {
            if let (true, Some(old), Some(cur)) = (s.dirty, s.old, s.cur) {
                ops.compare_and_set(s.key, Some(&old), Some(&cur));
                if s.rearm {
                    let proto = self.services[cur.service as usize].proto;
                    ops.arm_timer(
                        s.key,
                        cur.last_seen_ns.saturating_add(self.timeout(proto, &cur)),
                    );
                }
            }
        }
        if need_loads {
            // Loads of least-connections services with new connections: counters read
            // with a zero increment (atomic, never read-modify-write).
            self.loads.resize_with(self.services.len(), Vec::new);
            for (si, svc) in self.services.iter().enumerate() {
                self.loads[si].clear();
                let wanted = svc.algorithm == Algorithm::LeastConnections
                    && self.slots.iter().any(|s| s.new && s.service as usize == si);
                for b in &svc.backends {
                    let id = wanted.then(|| ops.incr(b.load_key, 0));
                    self.loads[si].push((id, 0));
                }
            }
            let r = store.execute(&mut ops);
            self.ops = ops;
            r?;
            for l in self.loads.iter_mut() {
                for e in l.iter_mut() {
                    if let Some(id) = e.0 {
                        e.1 = self.ops.counter(id);
                    }
                }
            }
            ops = std::mem::take(&mut self.ops);
            ops.clear();
        }
        // Claim new connections: the record (compare-and-set against what was read),
        // the chosen backend's load, the old backend's if replacing an expired record.
        let now = ctx.now_ns;
        for si in 0..self.slots.len() {
            if !self.slots[si].new {
                continue;
            }
            let Some(b) = self.choose(si) else {
                continue;
            };
            let s = &self.slots[si];
            let c = Conn {
                flags: 0,
                service: s.service,
                backend: b,
                last_seen_ns: now,
            };
            let svc = &self.services[s.service as usize];
            let cas = ops.compare_and_set(s.key, s.old.as_ref(), Some(&c));
            ops.incr(svc.backends[b as usize].load_key, 1);
            if let Some(o) = s.old {
                if let Some(ob) = self.load_key(o.service as usize, o.backend as usize) {
                    ops.incr(ob, -1);
                }
            }
            ops.arm_timer(s.key, now.saturating_add(self.timeout(svc.proto, &c)));
            let s = &mut self.slots[si];
            s.cas = Some(cas);
            s.cur = Some(c);
        }
        let r = store.execute(&mut ops);
        self.ops = ops;
        r?;
        if self.pending.is_empty() {
            return Ok(());
        }

        // After a lost race: undo our load changes and adopt the winner's record.
        self.ops2.clear();
        for si in 0..self.slots.len() {
            let s = &self.slots[si];
            let (Some(cas), Some(c)) = (s.cas, s.cur) else {
                continue;
            };
            if self.ops.swapped(cas) {
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
            let g = self.ops2.get(s.key);
            let s = &mut self.slots[si];
            s.reread = Some(g);
            s.cur = None;
        }
        if !self.ops2.is_empty() {
            store.execute(&mut self.ops2)?;
            for i in 0..self.slots.len() {
                if let Some(g) = self.slots[i].reread {
                    let v = self.ops2.decode::<Conn>(g).ok().flatten();
                    self.slots[i].cur = v.filter(|c| self.alive(c, now));
                }
            }
        }
        for k in 0..self.pending.len() {
            let i = self.pending[k] as usize;
            let plan = self.plan[i];
            let slot = match plan {
                Plan::In { slot } | Plan::Out { slot, .. } => slot as usize,
                Plan::Skip => continue,
            };
            let p = &mut batch.pkts[i];
            match self.slots[slot].cur {
                Some(c) => {
                    let (frame, meta) = p.data_and_meta_mut();
                    if let Err(r) = self.rewrite(frame, meta, plan, &c) {
                        p.drop_by(ctx.stage, r);
                    }
                }
                None if self.slots[slot].cas.is_none() => {
                    self.c.no_backend += 1;
                    p.drop_by(ctx.stage, "no_backend");
                }
                None => {
                    self.c.no_state += 1;
                    p.drop_by(ctx.stage, "no_state");
                }
            }
        }
        Ok(())
    }

    fn on_timers(&mut self, ctx: &mut Ctx<'_>, store: &mut dyn StateStore) -> Result<(), NfError> {
        let now = ctx.now_ns;
        loop {
            self.keys.clear();
            store.take_expired(self.ns, now, TIMER_BATCH, &mut self.keys)?;
            if self.keys.is_empty() {
                return Ok(());
            }
            self.ops.clear();
            self.gets.clear();
            for &k in &self.keys {
                self.gets.push(self.ops.get(k));
            }
            store.execute(&mut self.ops)?;
            self.ops2.clear();
            self.ids.clear();
            for (n, &k) in self.keys.iter().enumerate() {
                let mut entry = None;
                match self.ops.decode::<Conn>(self.gets[n]) {
                    Ok(Some(c)) if self.alive(&c, now) => {
                        let proto = self.services[c.service as usize].proto;
                        self.ops2
                            .arm_timer(k, c.last_seen_ns.saturating_add(self.timeout(proto, &c)));
                    }
                    Ok(Some(c)) => entry = Some((self.ops2.compare_and_set(k, Some(&c), None), c)),
                    Ok(None) => {}
                    Err(_) => {
                        self.c.decode_errors += 1;
                        self.ops2.delete(k);
                    }
                }
                self.ids.push(entry);
            }
            store.execute(&mut self.ops2)?;
            // The load goes down only with a record we removed.
            self.ops.clear();
            for e in self.ids.iter().flatten() {
                if self.ops2.swapped(e.0) {
                    if let Some(k) = self.load_key(e.1.service as usize, e.1.backend as usize) {
                        self.ops.incr(k, -1);
                    }
                    self.c.closed += 1;
                }
            }
            store.execute(&mut self.ops)?;
            if self.keys.len() < TIMER_BATCH {
                return Ok(());
            }
        }
    }

    fn counters(&self, out: &mut Vec<(&'static str, u64)>) {
        let c = &self.c;
        out.extend_from_slice(&[
            ("packets", c.packets),
            ("new_connections", c.new_connections),
            ("to_backend", c.to_backend),
            ("to_client", c.to_client),
            ("no_state", c.no_state),
            ("no_backend", c.no_backend),
            ("closed", c.closed),
            ("races_lost", c.races_lost),
            ("fragments", c.fragments),
            ("decode_errors", c.decode_errors),
            ("rewrite_errors", c.rewrite_errors),
        ]);
    }
}

#[cfg(test)]
mod tests;
