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
//! Per batch ([`sluice_nf::batch`]): one `execute` reads the connections of the batch; one more writes
//! changed records and claims new connections (compare-and-set against the value
//! read, so instances racing on one new connection agree on one backend), plus
//! one in between for `least_connections` services with new connections (reading
//! loads). Established packets: one batched read, no write except on FIN/RST or a
//! `last_seen` refresh (at most once per `refresh_ms`).
//!
//! Expiry is judged at each packet's own time with the timer's rule, and a new
//! connection's time is its first packet's; the packets of a batch that wait
//! for a new connection's claim (later client packets, replies behind a SYN)
//! are decided in order as if each came alone and folded into what the claim
//! writes, so verdicts do not depend on batching. `least_connections` choices
//! do: a backend's load drops when a timer (or a packet) finds a connection
//! expired.
//!
//! A return path is recognised by its source (backend address, port, protocol), so a
//! backend endpoint may belong to one service only (checked at configuration).

mod claim;
mod config;
mod conn;
mod decide;
pub mod health;
pub mod maglev;

use rustc_hash::FxHashMap;
use sluice_nf::batch::{self, Pass};
use sluice_nf::{BackendAdmin, BackendState, Batch, Ctx, NetworkFunction, NfError};
use sluice_state::{Key, Namespace, OpId, Ops, StateStore};
use sluice_wire::parse::{Fragment, L4};
use sluice_wire::{ip_proto, FlowKey, IpAddr};

pub use config::{
    build, Algorithm, BackendConfig, CheckProto, Config, ConfigError, HealthCheckConfig, Proto,
    ServiceConfig, Timeouts, MAX_CHECK_INTERVAL_MS, MAX_CHECK_THRESHOLD, MIN_CHECK_INTERVAL_MS,
};
pub use conn::{Conn, CONN_BYTES, CONN_VERSION, FIN_CLIENT, FIN_SERVER, RST_SEEN};

use config::Service;
use conn::ret_parts;
use decide::Replies;

const TABLE_CONN: u8 = 1;
const TABLE_LOAD: u8 = 2;
const TABLE_RET: u8 = 3;
const TIMER_BATCH: usize = 1024;

#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    packets: u64,
    new_connections: u64,
    to_backend: u64,
    to_client: u64,
    no_state: u64,
    no_backend: u64,
    /// Packets of connections whose backend was removed (drained past its
    /// deregistration delay).
    deregistered: u64,
    closed: u64,
    races_lost: u64,
    fragments: u64,
    decode_errors: u64,
    rewrite_errors: u64,
    encapsulated: u64,
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
    pass: Pass<Lb>,
    ops2: Ops,
    /// The batch's reply records (read with the connection records, or in the
    /// second reads).
    rets: Replies,
    /// Packets waiting for their connection's claim.
    pending: Vec<u32>,
    /// Reused by the fold of waiting packets: (connection record, its
    /// replies' record so far).
    fold_replies: Vec<(u32, Conn)>,
    /// A least-connections service has a new connection in this batch.
    need_loads: bool,
    /// Per service, per backend: (load counter op, load as seen plus this batch's picks).
    loads: Vec<Vec<(Option<OpId>, i64)>>,
    keys: Vec<Key>,
    gets: Vec<OpId>,
    ids: Vec<Option<(OpId, Conn)>>,
    others: Vec<Option<OpId>>,
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

    /// Replaces the health and drain states of the backends (see
    /// [`NetworkFunction::set_backend_states`]): an entry with a port names
    /// that backend, one without every backend at its address. Only services
    /// whose eligible set changed rebuild their Maglev table, so an unchanged
    /// list costs a comparison. Returns how many backends an entry matched.
    pub fn set_backend_states(&mut self, states: &[BackendAdmin]) -> usize {
        let mut n = 0;
        for s in &mut self.services {
            let mut changed = false;
            for b in &mut s.backends {
                let admin = states
                    .iter()
                    .find(|e| e.addr == b.addr && e.port.is_none_or(|p| p == b.port))
                    .map_or(BackendState::Up, |e| e.state);
                if admin != BackendState::Up {
                    n += 1;
                }
                if admin != b.admin {
                    changed |= admin.takes_new() != b.admin.takes_new();
                    b.admin = admin;
                }
            }
            if changed {
                s.rebuild();
            }
        }
        n
    }

    /// The run-time state of backend `backend` of service `service`.
    pub fn backend_state(&self, service: usize, backend: usize) -> Option<BackendState> {
        Some(self.services.get(service)?.backends.get(backend)?.admin)
    }

    /// Whether the backend of connection `c` was removed.
    fn removed(&self, c: &Conn) -> bool {
        self.services
            .get(c.service as usize)
            .and_then(|s| s.backends.get(c.backend as usize))
            .is_some_and(|b| b.admin == BackendState::Removed)
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

    /// The key of the reply record of (client flow, backend).
    fn ret_key(&self, canon: &FlowKey, backend: u16) -> Key {
        Key::flow(self.ns, TABLE_RET, canon, &backend.to_be_bytes())
    }

    /// The deadline of connection `c`.
    fn deadline(&self, c: &Conn) -> u64 {
        let proto = self
            .services
            .get(c.service as usize)
            .map_or(ip_proto::TCP, |s| s.proto);
        c.last_seen_ns.saturating_add(self.timeout(proto, c))
    }

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
            zone: canon.zone,
            src: b.addr,
            dst: addr,
            src_port: b.port,
            dst_port: port,
            proto: canon.proto,
        };
        Some(reply.symmetric_hash())
    }

    /// The client's flow (to the VIP) of a backend's reply flow `f` of service `svc`.
    fn client_of(&self, f: &FlowKey, svc: u16) -> FlowKey {
        let s = &self.services[svc as usize];
        FlowKey {
            zone: f.zone,
            src: f.dst,
            dst: s.vip,
            src_port: f.dst_port,
            dst_port: s.port,
            proto: f.proto,
        }
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
        for p in batch
            .pkts
            .iter()
            .filter(|p| p.is_live() && p.meta.is_ip() && !p.meta.is_tunnelled())
        {
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
        batch::split(self, |lb, pass| {
            lb.rets.clear();
            lb.pending.clear();
            lb.need_loads = false;
            pass.gather(lb, batch, ctx);
            if pass.recs.is_empty() {
                return Ok(());
            }
            lb.c.decode_errors += pass.read(lb, store, ctx.now_ns)?;
            lb.rets
                .load_with(&pass.ops, 0, |r, v| r.load(v.ok().flatten()));
            lb.second_reads(batch, pass, store)?;
            pass.decide(lb, batch, ctx);

            // Writes of changed records, each by the direction it belongs to,
            // then (after reading loads if needed) the claims of new connections.
            pass.queue_writes(lb);
            lb.queue_ret_writes(&mut pass.ops);
            if lb.need_loads {
                lb.read_loads(pass, store)?;
            }
            lb.claim(batch, pass, ctx.stage);
            lb.create_replies(batch, pass);
            store.execute(&mut pass.ops)?;
            if lb.pending.is_empty() {
                return Ok(());
            }
            lb.settle_races(pass, store)?;
            lb.finish_pending(batch, ctx, pass);
            Ok(())
        })
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
            self.pass.ops.clear();
            self.gets.clear();
            for &k in &self.keys {
                self.gets.push(self.pass.ops.get(k));
            }
            store.execute(&mut self.pass.ops)?;
            // The other direction's record of each.
            self.ops2.clear();
            self.others.clear();
            for n in 0..self.keys.len() {
                let k = self.keys[n];
                let want = match (k.table(), self.pass.ops.decode::<Conn>(self.gets[n])) {
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
                let reads = std::mem::take(&mut self.pass.ops);
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
                self.pass.ops = reads;
            }
            self.ops2 = ops;
            if self.keys.len() < TIMER_BATCH {
                return Ok(());
            }
        }
    }

    fn set_backend_states(&mut self, states: &[BackendAdmin]) -> usize {
        Lb::set_backend_states(self, states)
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
            ("deregistered", c.deregistered),
            ("closed", c.closed),
            ("races_lost", c.races_lost),
            ("fragments", c.fragments),
            ("encapsulated", c.encapsulated),
            ("decode_errors", c.decode_errors),
            ("rewrite_errors", c.rewrite_errors),
        ]);
    }
}

#[cfg(test)]
mod tests;
