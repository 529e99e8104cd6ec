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
const TABLE_RET: u8 = 3;
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
        rets: Vec::new(),
        ret_of: FxHashMap::default(),
        plan: Vec::new(),
        pending: Vec::new(),
        loads: Vec::new(),
        keys: Vec::new(),
        gets: Vec::new(),
        ids: Vec::new(),
        others: Vec::new(),
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
    /// Backend `backend` to client; `ret` is the reply direction's record.
    Out {
        slot: u32,
        backend: u16,
        ret: u32,
    },
}

/// The reply direction's record of a connection to one backend (table
/// `TABLE_RET`, keyed by the client flow and the backend): `last_seen` and the
/// flags the backend's packets set. Written only by the instance the replies go
/// to; read by the client direction only when its own record cannot decide.
struct Ret {
    key: Key,
    /// The reply flow's direction-invariant hash if this batch has replies of it
    /// (then this instance writes the record).
    hash: Option<u32>,
    get: OpId,
    /// Read in the second round trip (`ops2`).
    late: bool,
    old: Option<Conn>,
    cur: Option<Conn>,
    dirty: bool,
    through: bool,
    /// The connection's closing state changed: re-arm its timer at this deadline.
    rearm: Option<u64>,
    /// Created for replies that waited for their connection's claim.
    with_claim: bool,
}

struct Slot {
    key: Key,
    /// The canonical client flow.
    canon: FlowKey,
    service: u16,
    /// Hash of the client flow, for Maglev.
    hash: u32,
    /// The client flow's direction-invariant hash if client packets use the record
    /// (then this instance writes it).
    own: Option<u32>,
    get: OpId,
    /// The reply record consulted for the client direction (`rets` index).
    ret: Option<u32>,
    /// A store read of the record after a cached copy named another backend.
    fresh: Option<OpId>,
    /// The record as read (compare-and-set expectation).
    old: Option<Conn>,
    cur: Option<Conn>,
    dirty: bool,
    rearm: bool,
    /// Flags changed: the write goes to the store before the batch leaves.
    through: bool,
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
    rets: Vec<Ret>,
    ret_of: FxHashMap<Key, u32>,
    plan: Vec<Plan>,
    pending: Vec<u32>,
    /// Per service, per backend: (load counter op, load as seen plus this batch's picks).
    loads: Vec<Vec<(Option<OpId>, i64)>>,
    keys: Vec<Key>,
    gets: Vec<OpId>,
    ids: Vec<Option<(OpId, Conn)>>,
    others: Vec<Option<OpId>>,
    c: Counters,
}

/// The client flow and backend of a reply record's key.
fn ret_parts(k: &Key) -> Option<(FlowKey, u16)> {
    let p = k.payload();
    let n = p.len().checked_sub(2)?;
    Some((
        FlowKey::decode(&p[..n])?,
        u16::from_be_bytes([p[n], p[n + 1]]),
    ))
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

    /// The shortest timeout of a connection of `proto` (TCP: closing).
    fn min_timeout(&self, proto: u8) -> u64 {
        if proto == ip_proto::UDP {
            self.t_udp
        } else {
            self.t_closing.min(self.t_tcp)
        }
    }

    /// Whether one direction's record alone shows the connection alive. A record
    /// with a FIN or RST flag is judged by the shortest timeout, since the other
    /// direction's flags may make the connection closing; `false` means "ask the
    /// other record", not "expired".
    fn alive_alone(&self, c: &Conn, now: u64) -> bool {
        let Some(s) = self.services.get(c.service as usize) else {
            return false;
        };
        let t = if c.flags != 0 {
            self.min_timeout(s.proto)
        } else {
            self.timeout(s.proto, c)
        };
        (c.backend as usize) < s.backends.len() && now < c.last_seen_ns.saturating_add(t)
    }

    /// The connection as both directions' records describe it: the later
    /// `last_seen`, the flags of both.
    fn merged(c: &Conn, r: Option<&Conn>) -> Conn {
        match r {
            Some(r) if r.backend == c.backend && r.service == c.service => Conn {
                flags: c.flags | r.flags,
                last_seen_ns: c.last_seen_ns.max(r.last_seen_ns),
                ..*c
            },
            _ => *c,
        }
    }

    fn ret_key(&self, canon: &FlowKey, backend: u16) -> Key {
        Key::flow(self.ns, TABLE_RET, canon, &backend.to_be_bytes())
    }

    /// The reply record of (client flow, backend); `hash`: the reply flow's hash if
    /// a reply of this batch uses it.
    fn ret_for(&mut self, canon: &FlowKey, backend: u16, hash: Option<u32>, ops_is_2: bool) -> u32 {
        let key = self.ret_key(canon, backend);
        if let Some(&r) = self.ret_of.get(&key) {
            let e = &mut self.rets[r as usize];
            e.hash = e.hash.or(hash);
            return r;
        }
        let ops = if ops_is_2 {
            &mut self.ops2
        } else {
            &mut self.ops
        };
        // Only the instance the replies go to writes it: absence may be cached.
        let get = match hash {
            Some(h) => ops.get_owned(key, h),
            None => ops.get(key),
        };
        let r = self.rets.len() as u32;
        self.rets.push(Ret {
            key,
            hash,
            get,
            late: ops_is_2,
            old: None,
            cur: None,
            dirty: false,
            through: false,
            rearm: None,
            with_claim: false,
        });
        self.ret_of.insert(key, r);
        r
    }

    fn slot_for(&mut self, client_flow: &FlowKey, service: u16, reply_hash: Option<u32>) -> u32 {
        let canon = client_flow.canonical().0;
        let key = Key::flow(self.ns, TABLE_CONN, &canon, &[]);
        let own = reply_hash.is_none().then(|| client_flow.symmetric_hash());
        let s = self.slots.len() as u32;
        match self.slot_of.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => {
                let s = *e.get();
                let slot = &mut self.slots[s as usize];
                slot.own = slot.own.or(own);
                return s;
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(s);
            }
        }
        // The client direction owns the record; the reply direction (steered by
        // the reply flow's hash) may cache it only while present: the client
        // direction creates it.
        let get = match (own, reply_hash) {
            (Some(h), _) => self.ops.get_owned(key, h),
            (None, Some(h)) => self.ops.get_present(key, h),
            (None, None) => self.ops.get(key),
        };
        self.slots.push(Slot {
            key,
            canon,
            service,
            hash: client_flow.directional_hash(),
            own,
            get,
            ret: None,
            fresh: None,
            old: None,
            cur: None,
            dirty: false,
            rearm: false,
            through: false,
            new: false,
            cas: None,
            reread: None,
        });
        s
    }

    /// The deadline of connection `c`.
    fn deadline(&self, c: &Conn) -> u64 {
        let proto = self
            .services
            .get(c.service as usize)
            .map_or(ip_proto::TCP, |s| s.proto);
        c.last_seen_ns.saturating_add(self.timeout(proto, c))
    }

    /// Queues the write of a changed record by the direction it belongs to: a
    /// refresh of a record refreshed less than half the shortest timeout ago is a
    /// plain write (deferrable under a lease; a timer handler deletes a record only
    /// once both directions are idle past that timeout, so it cannot resurrect
    /// one), anything else a compare-and-set against the value read.
    fn queue_write(
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

    /// The client's flow (to the VIP) of a backend's reply flow `f` of service `svc`.
    /// The hash that places a connection's replies (backend to client), and
    /// so names the owner of its reply record; `None` if the record names a
    /// service or backend this configuration no longer has.
    fn reply_hash(&self, canon: &FlowKey, c: &Conn) -> Option<u32> {
        let s = self.services.get(c.service as usize)?;
        let b = s.backends.get(c.backend as usize)?;
        let (addr, port) = if (canon.dst, canon.dst_port) == (s.vip, s.port) {
            (canon.src, canon.src_port)
        } else {
            (canon.dst, canon.dst_port)
        };
        let reply = FlowKey {
            src: b.addr,
            dst: addr,
            src_port: b.port,
            dst_port: port,
            proto: canon.proto,
        };
        Some(reply.symmetric_hash())
    }

    fn client_of(&self, f: &FlowKey, svc: u16) -> FlowKey {
        let s = &self.services[svc as usize];
        FlowKey {
            src: f.dst,
            dst: s.vip,
            src_port: f.dst_port,
            dst_port: s.port,
            proto: f.proto,
        }
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
                slot: self.slot_for(f, svc, None),
            });
        }
        if let Some(&(svc, backend)) = self.backs.get(&(f.src, f.src_port, f.proto)) {
            let client = self.client_of(f, svc);
            let reply_hash = f.symmetric_hash();
            let slot = self.slot_for(&client, svc, Some(reply_hash));
            let canon = self.slots[slot as usize].canon;
            let ret = self.ret_for(&canon, backend, Some(reply_hash), false);
            return Ok(Plan::Out { slot, backend, ret });
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

    /// What `classify` reads by the packet's own flow: a client packet its
    /// connection record (owned), a backend's reply the connection record
    /// (present only) and its own reply record (owned).
    fn prefetch(&self, batch: &Batch, ops: &mut Ops) {
        for p in batch.pkts.iter().filter(|p| p.is_live() && p.meta.is_ip()) {
            let m = &p.meta;
            let f = &m.flow;
            if m.fragment == Fragment::Later || !matches!(m.l4, L4::Tcp | L4::Udp) {
                continue;
            }
            if self.vips.contains_key(&(f.dst, f.dst_port, f.proto)) {
                let canon = f.canonical().0;
                let h = canon.directional_hash();
                if ops.first_listing(h, self.ns, TABLE_CONN) {
                    ops.get_owned(Key::flow(self.ns, TABLE_CONN, &canon, &[]), h);
                }
            } else if let Some(&(svc, backend)) = self.backs.get(&(f.src, f.src_port, f.proto)) {
                let h = f.symmetric_hash();
                if ops.first_listing(h, self.ns, TABLE_RET) {
                    let canon = self.client_of(f, svc).canonical().0;
                    ops.get_present(Key::flow(self.ns, TABLE_CONN, &canon, &[]), h);
                    ops.get_owned(self.ret_key(&canon, backend), h);
                }
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
        self.rets.clear();
        self.ret_of.clear();
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
        for r in self.rets.iter_mut() {
            let v = self.ops.decode::<Conn>(r.get).ok().flatten();
            r.old = v;
            r.cur = v;
        }

        // Only when a record alone cannot decide (rare): the client direction
        // reads the reply direction's record (closing flags, a SYN, a record that
        // looks expired), the reply direction re-reads a cached client record that
        // names another backend.
        self.ops2.clear();
        for i in 0..batch.pkts.len() {
            let p = &batch.pkts[i];
            match self.plan[i] {
                Plan::In { slot } => {
                    let s = &self.slots[slot as usize];
                    let Some(c) = s.cur else { continue };
                    let syn = p.meta.l4 == L4::Tcp && p.meta.tcp_flags & (SYN | ACK | RST) == SYN;
                    if s.ret.is_none() && (c.flags != 0 || syn || !self.alive_alone(&c, p.ts_ns)) {
                        let canon = s.canon;
                        // Read as its owner would: if this instance also holds the
                        // replies' hash range, its cache has the record (or knows
                        // there is none) and the read costs no round trip.
                        let h = self.reply_hash(&canon, &c);
                        let r = self.ret_for(&canon, c.backend, h, true);
                        self.slots[slot as usize].ret = Some(r);
                    }
                }
                Plan::Out { slot, backend, .. } => {
                    let s = &mut self.slots[slot as usize];
                    if s.own.is_none()
                        && s.fresh.is_none()
                        && s.cur.is_some_and(|c| c.backend != backend)
                    {
                        s.fresh = Some(self.ops2.get(s.key));
                    }
                }
                Plan::Skip => {}
            }
        }
        if !self.ops2.is_empty() {
            store.execute(&mut self.ops2)?;
            for s in self.slots.iter_mut() {
                if let Some(g) = s.fresh {
                    let v = self.ops2.decode::<Conn>(g).ok().flatten();
                    s.old = v;
                    s.cur = v;
                }
            }
            for r in self.rets.iter_mut().filter(|r| r.late) {
                let v = self.ops2.decode::<Conn>(r.get).ok().flatten();
                r.old = v;
                r.cur = v;
            }
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
            let tcp = m.l4 == L4::Tcp;
            let syn = tcp && m.tcp_flags & (SYN | ACK | RST) == SYN;
            let s = &self.slots[slot];
            let ret = match plan {
                Plan::Out { ret, .. } => Some(ret),
                _ => s.ret,
            };
            let r = ret.and_then(|r| self.rets[r as usize].cur);
            let view = s.cur.map(|c| Self::merged(&c, r.as_ref()));
            let usable = match (s.cur, view) {
                (Some(c), Some(v)) if ret.is_none() => self.alive_alone(&c, now).then_some(v),
                (Some(_), Some(v)) => self.alive(&v, now).then_some(v),
                _ => None,
            };
            match usable {
                // A new SYN on a closing connection's 4-tuple is a new connection.
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
                        let c = self.slots[slot].cur.unwrap_or(v);
                        let mut n = c;
                        n.flags = flags(c.flags, FIN_CLIENT);
                        if n.flags != c.flags
                            || now.saturating_sub(c.last_seen_ns) >= self.refresh_ns
                        {
                            n.last_seen_ns = now.max(c.last_seen_ns);
                            let nv = Self::merged(&n, r.as_ref());
                            let s = &mut self.slots[slot];
                            s.rearm |= nv.closing() != v.closing();
                            s.through |= n.flags != c.flags;
                            s.cur = Some(n);
                            s.dirty = true;
                        }
                    } else if let Some(ri) = ret {
                        // The reply direction's own record, created on its first
                        // packet; a SYN-ACK starts a new connection's flags afresh.
                        let e = &self.rets[ri as usize];
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
                            let c = self.slots[slot].cur.unwrap_or(v);
                            let nv = Self::merged(&c, Some(&n));
                            let rearm = (nv.closing() != v.closing()).then(|| self.deadline(&nv));
                            let e = &mut self.rets[ri as usize];
                            e.through |= old_flags != Some(n.flags);
                            e.rearm = rearm.or(e.rearm);
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

        // Writes of changed records, each by the direction it belongs to.
        let mut ops = std::mem::take(&mut self.ops);
        ops.clear();
        for s in &self.slots {
            if let (true, false, Some(cur)) = (s.dirty, s.new, s.cur) {
                let proto = self.services[cur.service as usize].proto;
                let half = self.min_timeout(proto) / 2;
                Self::queue_write(&mut ops, s.key, s.old, cur, s.own, s.through, half);
                if s.rearm {
                    let r = s.ret.and_then(|r| self.rets[r as usize].cur);
                    ops.arm_timer(s.key, self.deadline(&Self::merged(&cur, r.as_ref())));
                }
            }
        }
        for e in &self.rets {
            let (true, Some(cur)) = (e.dirty, e.cur) else {
                continue;
            };
            let proto = self.services[cur.service as usize].proto;
            let half = self.min_timeout(proto) / 2;
            if e.old.is_none() {
                // Created here: its own timer removes it once it is idle and its
                // connection is gone or idle too.
                match e.hash {
                    Some(h) => ops.compare_and_set_owned(e.key, None, Some(&cur), h),
                    None => ops.compare_and_set(e.key, None, Some(&cur)),
                };
                ops.arm_timer(e.key, self.deadline(&cur));
            } else {
                Self::queue_write(&mut ops, e.key, e.old, cur, e.hash, e.through, half);
            }
            if let (Some(d), Some((k, _))) = (e.rearm, ret_parts(&e.key)) {
                ops.arm_timer(Key::flow(self.ns, TABLE_CONN, &k, &[]), d);
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
            let cas = match s.own {
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
            ops.arm_timer(s.key, now.saturating_add(self.timeout(svc.proto, &c)));
            let s = &mut self.slots[si];
            s.cas = Some(cas);
            s.cur = Some(c);
        }
        // Replies in the batch that opened their connection (a SYN-ACK behind its
        // SYN) waited for the claim; their own record is created in the claim's
        // round trip, as the first reply of a known connection creates it, so the
        // connection's next replies (established traffic) find it instead of
        // creating it then.
        let mut created = false;
        for k in 0..self.pending.len() {
            let i = self.pending[k] as usize;
            let Plan::Out { slot, backend, ret } = self.plan[i] else {
                continue;
            };
            let Some(c) = self.slots[slot as usize].cur else {
                continue;
            };
            let e = &mut self.rets[ret as usize];
            if e.old.is_some() || e.hash.is_none() {
                continue;
            }
            let m = &batch.pkts[i].meta;
            let mut n = e.cur.unwrap_or(Conn {
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
            n.last_seen_ns = n.last_seen_ns.max(batch.pkts[i].ts_ns);
            e.cur = Some(n);
            e.dirty = true;
            e.with_claim = true;
            created = true;
        }
        if created {
            for e in self.rets.iter().filter(|e| e.with_claim) {
                if let (Some(cur), Some(h)) = (e.cur, e.hash) {
                    ops.compare_and_set_owned(e.key, None, Some(&cur), h);
                    ops.arm_timer(e.key, self.deadline(&cur));
                }
            }
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

    /// Timers are armed on both directions' records. A connection's record is
    /// deleted (and its backend's load decremented) only when both directions are
    /// idle past the connection's timeout; a reply record when it is idle and its
    /// connection is gone, belongs to another backend, or is idle too. Otherwise
    /// the timer is re-armed. Deletes are compare-and-sets against the value read.
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
            // The other direction's record of each.
            self.ops2.clear();
            self.others.clear();
            for n in 0..self.keys.len() {
                let k = self.keys[n];
                let want = match (k.table(), self.ops.decode::<Conn>(self.gets[n])) {
                    (TABLE_CONN, Ok(Some(c))) => k.flow_key().map(|f| self.ret_key(&f, c.backend)),
                    (TABLE_RET, Ok(Some(_))) => {
                        ret_parts(&k).map(|(f, _)| Key::flow(self.ns, TABLE_CONN, &f, &[]))
                    }
                    _ => None,
                };
                let other = want.map(|ok| self.ops2.get(ok));
                self.others.push(other);
            }
            if !self.ops2.is_empty() {
                store.execute(&mut self.ops2)?;
            }
            let mut ops = std::mem::take(&mut self.ops2);
            let mut deletes = Vec::new();
            self.ids.clear();
            {
                let reads = std::mem::take(&mut self.ops);
                let mut next = Ops::new();
                for (n, &k) in self.keys.iter().enumerate() {
                    let mut entry = None;
                    let other = self.others[n].and_then(|g| ops.decode::<Conn>(g).ok().flatten());
                    match reads.decode::<Conn>(self.gets[n]) {
                        Ok(Some(c)) => {
                            let view = match k.table() {
                                TABLE_CONN => Self::merged(&c, other.as_ref()),
                                _ => match other {
                                    Some(o) if o.backend == c.backend && o.service == c.service => {
                                        Self::merged(&o, Some(&c))
                                    }
                                    _ => c,
                                },
                            };
                            if self.alive(&view, now) {
                                next.arm_timer(k, self.deadline(&view));
                            } else {
                                entry = Some((next.compare_and_set(k, Some(&c), None), c));
                                // The reply record goes with it if still as read (else
                                // its own timer decides).
                                if let (TABLE_CONN, Some(o), Some(f)) =
                                    (k.table(), other, k.flow_key())
                                {
                                    next.compare_and_set(
                                        self.ret_key(&f, c.backend),
                                        Some(&o),
                                        None,
                                    );
                                }
                            }
                        }
                        Ok(None) => {}
                        Err(_) => {
                            self.c.decode_errors += 1;
                            next.delete(k);
                        }
                    }
                    self.ids.push(entry);
                }
                store.execute(&mut next)?;
                // Loads go down only with a connection record we removed; a record
                // a packet revived meanwhile is checked again later.
                ops.clear();
                for (n, e) in self.ids.iter().enumerate() {
                    let Some((cas, c)) = e else { continue };
                    let k = self.keys[n];
                    if !next.swapped(*cas) {
                        let proto = self
                            .services
                            .get(c.service as usize)
                            .map_or(ip_proto::TCP, |s| s.proto);
                        ops.arm_timer(k, now.saturating_add(self.min_timeout(proto)));
                    } else if k.table() == TABLE_CONN {
                        if let Some(lk) = self.load_key(c.service as usize, c.backend as usize) {
                            deletes.push(lk);
                        }
                        self.c.closed += 1;
                    }
                }
                for lk in deletes {
                    ops.incr(lk, -1);
                }
                if !ops.is_empty() {
                    store.execute(&mut ops)?;
                }
                self.ops = reads;
            }
            self.ops2 = ops;
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
