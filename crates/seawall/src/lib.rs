//! Seawall (Shieh et al., HotCloud 2010): VM-level, not flow-level, max-min
//! fair sharing of the links between hosts, enforced where traffic enters the
//! fabric, from congestion feedback of the receiving host.
//!
//! TCP divides a congested link per *flow*: a tenant with many connections, or
//! one that sends UDP without congestion control, takes the link from a tenant
//! with one connection. Seawall puts a rate controller in the sending host's
//! switch for every (source port, destination host) pair: the *entity*. Every
//! packet an entity sends carries a sequence number ([`wire`]); the receiving
//! host counts what arrived and what is missing and reports it back once per
//! period; the sender's controller lowers the entity's rate multiplicatively
//! when the report shows loss and raises it additively while the entity uses
//! what it has. Entities that share a bottleneck see its losses alike and, like
//! TCP flows, converge to equal shares, but an entity is a VM (or an NF
//! instance), however many flows it opens and whatever protocol it speaks.
//! Packets beyond an entity's rate are dropped at the sender (a policer), so a
//! flooding VM loses its own packets, not other tenants'.
//!
//! This crate is sans-IO: [`Sender::admit`] and [`Receiver::on_packet`] are
//! called per packet with the data plane's clock, [`Sender::on_feedback`] with
//! each decoded feedback message, [`Receiver::feedback`] when
//! [`Receiver::next_deadline`] passes. No sockets, no clock reads, no
//! allocation per packet once an entity exists.
//!
//! Rates are kept, as in the paper, per (sending port, *link*): a VM's share
//! of a link does not grow with the number of destinations it reaches over
//! it. An entity's packets leave at the least rate of the links on its path
//! ([`Sender::set_path`]); a path's report reaches every link on it; a link
//! makes one decision per period whatever the number of paths that report on
//! it, and a congested path does not cut a link that a path to another host
//! crossed clean, with enough packets that it would have lost some too (so
//! congestion behind one destination does not throttle the others). By
//! default a path is the link into its destination host alone: Sluice's
//! fabric is one switch, where that is the only link a path shares with no
//! path to another host (the sending host's own uplink is its own NIC).
//!
//! What differs from the paper: paths are given, not found (with ECMP, the
//! paper's flow-traceroute would supply them), and the control law is a plain
//! AIMD on the measured sending rate (the paper leaves the algorithm open:
//! "any rate control algorithm, such as TCP, TFRC, or QCN").

#![forbid(unsafe_code)]

pub mod audit;
mod fifo;
pub mod wire;

use std::collections::HashMap;

use fifo::Fifo;

pub use wire::Report;

/// The controllers' parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    /// How often a receiving host reports (and so how often a rate changes), ns.
    pub period_ns: u64,
    /// Lowest rate an entity is cut to, bits per second.
    pub min_rate_bps: u64,
    /// Highest rate, and the rate a new entity starts at (no limit until the
    /// network says otherwise: sharing is work-conserving).
    pub max_rate_bps: u64,
    /// Additive increase per period while the entity uses its rate, bits/s.
    pub increase_bps: u64,
    /// Multiplicative decrease on loss: the new rate is the old one (but at
    /// most twice the measured sending rate) times `1 - decrease`.
    pub decrease: f64,
    /// Depth of an entity's token bucket, as time at its rate, ns.
    pub burst_ns: u64,
    /// Least depth of the bucket, bytes (a few frames, so a low rate still
    /// passes whole frames).
    pub min_burst_bytes: u64,
    /// An entity that sent nothing for this long is forgotten, ns.
    pub idle_ns: u64,
    /// Bytes an entity may queue while over its rate ([`Sender::offer`]):
    /// packets wait instead of being dropped, so a TCP sender inside the
    /// entity sees delay and keeps its window instead of timing out. Beyond
    /// it, packets are dropped. 0: never queue (a policer).
    pub queue_bytes: usize,
    /// A receiver flags its path congested when a packet's one-way delay is
    /// this much above the least it has seen from that sender host (queueing
    /// on the way), ns: the signal comes before the queue overflows, so TCP
    /// senders inside the entities rarely see loss from the fabric at all.
    /// 0: loss only.
    pub queue_delay_ns: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            period_ns: 5_000_000,
            min_rate_bps: 2_000_000,
            max_rate_bps: 100_000_000_000,
            increase_bps: 10_000_000,
            decrease: 0.2,
            burst_ns: 2_000_000,
            min_burst_bytes: 16 * 1024,
            idle_ns: 10_000_000_000,
            queue_bytes: 256 * 1024,
            queue_delay_ns: 1_000_000,
        }
    }
}

/// Why a [`Config`] cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Checks that the parameters make a controller that can converge.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: &str| Err(ConfigError(m.to_string()));
        if self.period_ns < 100_000 || self.period_ns > 10_000_000_000 {
            return bad("seawall period must be between 0.1 ms and 10 s");
        }
        if self.min_rate_bps == 0 || self.min_rate_bps > self.max_rate_bps {
            return bad("seawall minimum rate must be above zero and at most the maximum rate");
        }
        if self.increase_bps == 0 {
            return bad("seawall additive increase must be above zero");
        }
        if !(self.decrease > 0.0 && self.decrease < 1.0) {
            return bad("seawall decrease must be between 0 and 1 (exclusive)");
        }
        if self.burst_ns == 0 || self.min_burst_bytes < 1600 {
            return bad("seawall burst must be above zero and at least one frame (1600 bytes)");
        }
        if self.queue_bytes != 0 && self.queue_bytes < 16 * 1024 {
            return bad("seawall queue must be 0 (drop at once) or at least 16 KiB");
        }
        Ok(())
    }
}

/// Most periods' worth of additive increase one clean report can give (an
/// entity silent for a long time comes back with this much more, not more).
const MAX_CATCH_UP: f64 = 20.0;

/// Periods without a report, while sending, that count as total loss.
pub const SILENCE_PERIODS: u64 = 4;

/// Who a rate applies to: a port of the sending host's switch (a VM or an NF
/// instance) and the host its packets go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Entity {
    /// Sending port.
    pub port: u16,
    /// Destination host.
    pub host: u32,
}

/// A link of the fabric. Rates are kept per (sending port, link), so a VM's
/// share of a link does not grow with the number of destinations it reaches
/// over it (the paper's "(senderVM, link)"): the packets of an entity leave
/// at the least rate of the links on its path ([`Sender::set_path`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Link(pub u64);

impl Link {
    /// The last link into `host`, which every path to `host` ends with. A
    /// path nobody set is this link alone (Sluice's fabric is one switch:
    /// the only link a path to a host shares with no path to another host).
    pub fn into_host(host: u32) -> Link {
        Link(host as u64)
    }

    /// A link shared by paths to several hosts (a rack's uplink, a core
    /// link), numbered by whoever knows the topology.
    pub fn shared(id: u32) -> Link {
        Link(1 << 32 | id as u64)
    }
}

/// Most links on one path.
pub const MAX_PATH_LINKS: usize = 8;

/// Counters of one entity (sender side).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EntityStats {
    /// Packets let through.
    pub admitted_packets: u64,
    /// Their bytes.
    pub admitted_bytes: u64,
    /// Packets dropped for being over the rate.
    pub policed_packets: u64,
    /// Their bytes.
    pub policed_bytes: u64,
    /// Packets the receiver reported as arrived.
    pub reported_received: u64,
    /// Packets the receiver reported as lost.
    pub reported_lost: u64,
    /// Feedback reports applied.
    pub feedbacks: u64,
    /// Multiplicative decreases (reports with loss).
    pub decreases: u64,
    /// Packets that waited in the entity's queue.
    pub queued_packets: u64,
    /// Packets waiting now.
    pub queue_packets_now: u64,
    /// Bytes waiting now.
    pub queue_bytes_now: u64,
    /// The port's weight.
    pub weight: u16,
}

/// The rate controller of one (sending port, link).
#[derive(Debug, Clone)]
struct LinkCtl {
    rate_bps: u64,
    /// Bytes that may be sent now.
    tokens: u64,
    refilled_ns: u64,
    /// Bytes sent over the link since feedback was last applied to it.
    period_bytes: u64,
    period_start_ns: u64,
    /// Highest sending rate of recent feedback, decaying by 1/8 each time.
    peak_bps: u64,
    last_sent_ns: u64,
    /// Feedback gathered since the last decision: paths that reported
    /// congestion (destination host, loss rate, or None for queueing delay
    /// alone); a decision is taken once per period, as a single contender's.
    congested: Vec<(u32, Option<f64>)>,
    /// When a path to each destination host through this link last reported
    /// no congestion, and how many packets it counted: a path to another host
    /// that got enough packets through clean says the link is not what
    /// congests a path that did not.
    clean: Vec<(u32, u64, u32)>,
    decreases: u64,
}

impl LinkCtl {
    fn new(cfg: &Config, now_ns: u64) -> LinkCtl {
        LinkCtl {
            rate_bps: cfg.max_rate_bps,
            tokens: depth(cfg, cfg.max_rate_bps),
            refilled_ns: now_ns,
            period_bytes: 0,
            period_start_ns: now_ns,
            peak_bps: 0,
            last_sent_ns: now_ns,
            congested: Vec::new(),
            clean: Vec::new(),
            decreases: 0,
        }
    }

    fn refill(&mut self, cfg: &Config, now_ns: u64) {
        let dt = now_ns.saturating_sub(self.refilled_ns);
        let add = (self.rate_bps as u128 * dt as u128 / 8_000_000_000) as u64;
        // Whole bytes only: the rest of the interval stays to be refilled.
        if add > 0 {
            self.tokens = (self.tokens + add).min(depth(cfg, self.rate_bps));
            self.refilled_ns = now_ns;
        }
    }

    /// When `len` bytes' tokens will be there.
    fn ready_at(&self, len: u64) -> u64 {
        let need = len.saturating_sub(self.tokens);
        if need == 0 {
            return self.refilled_ns;
        }
        let ns = (need as u128 * 8_000_000_000).div_ceil(self.rate_bps.max(1) as u128) as u64;
        self.refilled_ns + ns
    }

    /// Applies one path's feedback: from the path to `host`, `f`. A link is
    /// one contender however many paths cross it: what its paths report
    /// within a period makes one decision, a cut or an increase.
    fn feedback(&mut self, cfg: &Config, host: u32, f: PathFeedback, weight: u16, now_ns: u64) {
        if f.congested {
            let loss = (f.lost > 0 || f.received == 0).then(|| {
                if f.received + f.lost == 0 {
                    1.0
                } else {
                    f64::from(f.lost) / f64::from(f.received + f.lost)
                }
            });
            match self.congested.iter_mut().find(|(h, _)| *h == host) {
                Some(c) => {
                    c.1 = match (c.1, loss) {
                        (Some(a), Some(b)) => Some(a.max(b)),
                        (a, b) => a.or(b),
                    }
                }
                None => self.congested.push((host, loss)),
            }
        } else {
            match self.clean.iter_mut().find(|(h, _, _)| *h == host) {
                Some(c) => (c.1, c.2) = (now_ns, f.received),
                None => self.clean.push((host, now_ns, f.received)),
            }
        }
        // Reports of one path come a period apart, give or take.
        let elapsed = now_ns.saturating_sub(self.period_start_ns).max(1);
        if elapsed < cfg.period_ns / 4 * 3 {
            return;
        }
        let sent_bps = (self.period_bytes as u128 * 8_000_000_000 / elapsed as u128) as u64;
        self.peak_bps = sent_bps.max(self.peak_bps - self.peak_bps / 8);
        // A congested path counts unless a path to another host crossed this
        // link clean lately with enough packets that it would have lost some
        // too had the link dropped them (a drop-tail queue drops from every
        // path through it alike): then what congests it is elsewhere on its
        // path. A path congested by queueing delay alone: any clean path
        // through the link clears it (the queue would have delayed it too).
        let clean = &self.clean;
        let congested = self.congested.iter().any(|&(h, loss)| {
            !clean.iter().any(|&(ch, t, n)| {
                ch != h
                    && now_ns.saturating_sub(t) < cfg.period_ns
                    && match loss {
                        None => n > 0,
                        Some(p) => p * f64::from(n) >= CLEAN_EVIDENCE,
                    }
            })
        });
        self.congested.clear();
        if congested {
            // Cut the allowance, but from no higher than twice the recent
            // peak of what was sent: an allowance never used (a new link's)
            // would make the cut toothless. Not from this period's rate: a
            // TCP sender that just halved its window, or sits out a
            // retransmission timeout, would drag its own allowance down with
            // it, cut after cut, while a flooder's stays.
            let base = self
                .rate_bps
                .min(self.peak_bps.saturating_mul(2).max(cfg.min_rate_bps));
            let cut = (base as f64 * (1.0 - cfg.decrease)) as u64;
            self.rate_bps = cut.max(cfg.min_rate_bps);
            self.decreases += 1;
        } else {
            // No congestion on the link: probe for more, like a TCP sender's
            // additive increase. Whether the allowance was used does not
            // matter: a TCP sender that backed off after a loss must get its
            // share back, and an allowance never used is cut to twice the
            // recent peak at the next loss. The step follows time, not
            // reports: a path that reports less often (a TCP sender waiting
            // out a timeout) must not grow slower than a flooder's.
            let periods = (elapsed as f64 / cfg.period_ns as f64).clamp(0.0, MAX_CATCH_UP);
            let step = (cfg.increase_bps as f64 * periods * f64::from(weight)) as u64;
            self.rate_bps = self.rate_bps.saturating_add(step).min(cfg.max_rate_bps);
        }
        self.tokens = self.tokens.min(depth(cfg, self.rate_bps));
        self.period_bytes = 0;
        self.period_start_ns = now_ns;
    }
}

/// Packets a clean path must have carried, times the loss rate of a
/// congested one, to clear a link they share of that congestion: at 3, a
/// link dropping uniformly would have dropped none of them with a
/// probability of about 5 %.
const CLEAN_EVIDENCE: f64 = 3.0;

/// What a report (or a silence) says of one path since the one before.
#[derive(Debug, Clone, Copy)]
struct PathFeedback {
    congested: bool,
    received: u32,
    lost: u32,
}

/// The links of one path, held inline (no allocation per entity).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PathLinks {
    links: [Link; MAX_PATH_LINKS],
    len: u8,
}

impl PathLinks {
    fn new(links: &[Link]) -> PathLinks {
        let len = links.len().min(MAX_PATH_LINKS);
        let mut p = PathLinks {
            links: [Link(0); MAX_PATH_LINKS],
            len: len as u8,
        };
        p.links[..len].copy_from_slice(&links[..len]);
        p
    }

    fn as_slice(&self) -> &[Link] {
        &self.links[..self.len as usize]
    }
}

/// One entity: its sequence numbers, what its receiver reported, its queue.
#[derive(Debug, Clone)]
struct Path {
    links: PathLinks,
    /// Sequence number of the next packet.
    seq: u32,
    /// Bytes sent since the last report (for the silence check).
    period_bytes: u64,
    period_start_ns: u64,
    last_sent_ns: u64,
    /// The last report's cumulative counters (None: no report yet).
    last_report: Option<(u32, u32)>,
    stats: EntityStats,
    /// Packets waiting for tokens (allocated at the first wait).
    queue: Fifo,
}

impl Path {
    fn new(links: PathLinks, now_ns: u64) -> Path {
        Path {
            links,
            seq: 0,
            period_bytes: 0,
            period_start_ns: now_ns,
            last_sent_ns: now_ns,
            last_report: None,
            stats: EntityStats::default(),
            queue: Fifo::default(),
        }
    }

    /// Numbers a packet of `len` bytes (its links' tokens already taken).
    fn send(&mut self, len: u64) -> u32 {
        self.period_bytes += len;
        self.stats.admitted_packets += 1;
        self.stats.admitted_bytes += len;
        let s = self.seq;
        self.seq = self.seq.wrapping_add(1);
        s
    }

    fn drop_one(&mut self, len: u64) {
        self.stats.policed_packets += 1;
        self.stats.policed_bytes += len;
    }
}

/// The path to `host` given `topology` (the default: its own link alone).
fn path_to(topology: &HashMap<u32, PathLinks>, host: u32) -> PathLinks {
    topology
        .get(&host)
        .copied()
        .unwrap_or_else(|| PathLinks::new(&[Link::into_host(host)]))
}

/// The entity `key`, created on the path `topology` gives it if new.
fn path_entry<'a>(
    paths: &'a mut HashMap<Entity, Path>,
    topology: &HashMap<u32, PathLinks>,
    key: Entity,
    now_ns: u64,
) -> &'a mut Path {
    paths
        .entry(key)
        .or_insert_with(|| Path::new(path_to(topology, key.host), now_ns))
}

/// Refills the controllers of `port` on `path` (creating missing ones) and,
/// if `may_send` and all of them hold `len` bytes' tokens, takes them from
/// each: returns whether it did. A one-link path (every path in the agents)
/// costs one map lookup.
fn links_take(
    links: &mut HashMap<(u16, Link), LinkCtl>,
    cfg: &Config,
    port: u16,
    path: &PathLinks,
    len: u64,
    may_send: bool,
    now_ns: u64,
) -> bool {
    let mut ok = may_send;
    for l in path.as_slice() {
        let c = links
            .entry((port, *l))
            .or_insert_with(|| LinkCtl::new(cfg, now_ns));
        c.refill(cfg, now_ns);
        c.last_sent_ns = now_ns;
        ok &= c.tokens >= len;
        if path.len == 1 && ok {
            c.tokens -= len;
            c.period_bytes += len;
            return true;
        }
    }
    if ok && path.len > 1 {
        for l in path.as_slice() {
            if let Some(c) = links.get_mut(&(port, *l)) {
                c.tokens -= len;
                c.period_bytes += len;
            }
        }
    }
    ok
}

/// Bucket depth of an entity at `rate_bps`.
fn depth(cfg: &Config, rate_bps: u64) -> u64 {
    ((rate_bps as u128 * cfg.burst_ns as u128 / 8_000_000_000) as u64).max(cfg.min_burst_bytes)
}

/// What [`Sender::offer`] did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// Send it now, carrying this sequence number.
    Send(u32),
    /// It waits in the entity's queue; [`Sender::release`] hands it back.
    Queued,
    /// Over the rate and the queue is full: drop it.
    Dropped,
}

/// The sending side: one queue and sequence space per entity, one rate
/// controller per (port, link) on the entities' paths.
#[derive(Debug, Clone)]
pub struct Sender {
    cfg: Config,
    paths: HashMap<Entity, Path>,
    links: HashMap<(u16, Link), LinkCtl>,
    /// Paths to hosts other than the default ([`Sender::set_path`]).
    topology: HashMap<u32, PathLinks>,
    /// Entities with packets waiting.
    waiting: Vec<Entity>,
    /// Weights of ports other than 1.
    weights: HashMap<u16, u16>,
}

/// What [`Sender::admit`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Send it, carrying this sequence number.
    Send(u32),
    /// Over the entity's rate: drop it.
    Police,
}

impl Sender {
    /// A sender with no entities yet.
    pub fn new(cfg: Config) -> Sender {
        Sender {
            cfg,
            paths: HashMap::new(),
            links: HashMap::new(),
            topology: HashMap::new(),
            waiting: Vec::new(),
            weights: HashMap::new(),
        }
    }

    /// Sets the ports' weights (every port not listed weighs 1): a port of
    /// weight w gets w times the additive increase, so ports limited on the
    /// same path settle at shares in proportion to their weights (decreases
    /// are multiplicative, the same for all).
    pub fn set_weights(&mut self, weights: impl IntoIterator<Item = (u16, u16)>) {
        self.weights = weights
            .into_iter()
            .filter(|(_, w)| *w != 1)
            .map(|(p, w)| (p, w.max(1)))
            .collect();
    }

    /// Sets the links between this host and `host`, first to last (at most
    /// [`MAX_PATH_LINKS`], more are ignored; an empty list restores the
    /// default path, [`Link::into_host`] alone), for existing entities too.
    pub fn set_path(&mut self, host: u32, links: &[Link]) {
        let p = if links.is_empty() {
            self.topology.remove(&host);
            PathLinks::new(&[Link::into_host(host)])
        } else {
            let p = PathLinks::new(links);
            self.topology.insert(host, p);
            p
        };
        for (e, path) in self.paths.iter_mut() {
            if e.host == host {
                path.links = p;
            }
        }
    }

    /// The weight of `port`.
    pub fn weight(&self, port: u16) -> u16 {
        self.weights.get(&port).copied().unwrap_or(1)
    }

    /// The parameters.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Decides whether `port`'s packet of `len` bytes to `host` may leave now
    /// (a policer: what is over the rate is dropped, never queued).
    pub fn admit(&mut self, port: u16, host: u32, len: usize, now_ns: u64) -> Admit {
        let cfg = self.cfg;
        let p = path_entry(
            &mut self.paths,
            &self.topology,
            Entity { port, host },
            now_ns,
        );
        let links = p.links;
        let len = len as u64;
        p.last_sent_ns = now_ns;
        if !links_take(&mut self.links, &cfg, port, &links, len, true, now_ns) {
            p.drop_one(len);
            return Admit::Police;
        }
        Admit::Send(p.send(len))
    }

    /// Like [`Sender::admit`], but a packet over the rate waits in the
    /// entity's queue (up to [`Config::queue_bytes`]) instead of being
    /// dropped; `tag` is the caller's, handed back with it by
    /// [`Sender::release`]. Packets of one entity leave in the order offered.
    pub fn offer(&mut self, port: u16, host: u32, tag: u128, frame: &[u8], now_ns: u64) -> Offer {
        let cfg = self.cfg;
        let key = Entity { port, host };
        let p = path_entry(&mut self.paths, &self.topology, key, now_ns);
        let links = p.links;
        let len = frame.len() as u64;
        p.last_sent_ns = now_ns;
        let may_send = p.queue.is_empty();
        if links_take(&mut self.links, &cfg, port, &links, len, may_send, now_ns) {
            return Offer::Send(p.send(len));
        }
        if cfg.queue_bytes == 0 {
            p.drop_one(len);
            return Offer::Dropped;
        }
        if p.queue.is_empty() {
            // It starts waiting (the buffer is allocated at its first wait).
            if p.queue.capacity() == 0 {
                p.queue = Fifo::new(cfg.queue_bytes);
            }
            self.waiting.push(key);
        }
        if p.queue.push(tag, frame) {
            p.stats.queued_packets += 1;
            Offer::Queued
        } else {
            p.drop_one(len);
            Offer::Dropped
        }
    }

    /// Hands back, in order, every queued packet whose tokens have come:
    /// `emit(entity, sequence, tag, frame)`; returns how many.
    pub fn release(
        &mut self,
        now_ns: u64,
        mut emit: impl FnMut(Entity, u32, u128, &[u8]),
    ) -> usize {
        let cfg = self.cfg;
        let mut n = 0;
        let mut k = 0;
        while k < self.waiting.len() {
            let key = self.waiting[k];
            let Some(p) = self.paths.get_mut(&key) else {
                self.waiting.swap_remove(k);
                continue;
            };
            let links = p.links;
            while let Some(len) = p.queue.front().map(|(_, d)| d.len() as u64) {
                if !links_take(&mut self.links, &cfg, key.port, &links, len, true, now_ns) {
                    break;
                }
                // Numbered when it leaves, so the receiver sees no gap for
                // the time it waited.
                let s = p.send(len);
                if let Some((tag, d)) = p.queue.front() {
                    emit(key, s, tag, d);
                }
                p.queue.pop();
                n += 1;
            }
            if p.queue.is_empty() {
                self.waiting.swap_remove(k);
            } else {
                k += 1;
            }
        }
        n
    }

    /// When [`Sender::release`] next has something to hand back (None:
    /// nothing waits).
    pub fn next_release(&self) -> Option<u64> {
        self.waiting
            .iter()
            .filter_map(|k| {
                let p = self.paths.get(k)?;
                let len = p.queue.front()?.1.len() as u64;
                p.links
                    .as_slice()
                    .iter()
                    .map(|l| self.links.get(&(k.port, *l)).map_or(0, |c| c.ready_at(len)))
                    .max()
            })
            .min()
    }

    /// Applies a feedback message from `host`: each report's port is one of
    /// this host's entities sending to `host`. Reports of unknown ports are
    /// ignored (the entity was forgotten, or the report is stale). A report
    /// speaks for its path; it reaches each link on it.
    pub fn on_feedback(
        &mut self,
        host: u32,
        reports: impl IntoIterator<Item = Report>,
        now_ns: u64,
    ) {
        let cfg = self.cfg;
        for r in reports {
            let weight = self.weights.get(&r.port).copied().unwrap_or(1);
            let Some(p) = self.paths.get_mut(&Entity { port: r.port, host }) else {
                continue;
            };
            let (d_recv, d_lost) = match p.last_report {
                Some((rr, rl)) => (r.received.wrapping_sub(rr), r.lost.wrapping_sub(rl)),
                None => (r.received, r.lost),
            };
            p.last_report = Some((r.received, r.lost));
            // A report can only count packets that were sent: anything else is
            // a receiver that restarted, or garbage; start over from it.
            let sent = p.stats.admitted_packets;
            if u64::from(d_recv) + u64::from(d_lost) > sent.max(1) * 2 {
                continue;
            }
            p.stats.feedbacks += 1;
            p.stats.reported_received += u64::from(d_recv);
            p.stats.reported_lost += u64::from(d_lost);
            p.period_bytes = 0;
            p.period_start_ns = now_ns;
            let f = PathFeedback {
                congested: d_lost > 0 || r.congested,
                received: d_recv,
                lost: d_lost,
            };
            for l in p.links.as_slice() {
                if let Some(c) = self.links.get_mut(&(r.port, *l)) {
                    c.feedback(&cfg, host, f, weight, now_ns);
                }
            }
        }
    }

    /// An entity that has sent since its last report but heard nothing for
    /// [`SILENCE_PERIODS`] periods, from a receiver that did report before,
    /// takes the silence as loss of everything (as a TCP sender takes a
    /// retransmission timeout): the links of its path take it as congestion.
    /// Without this, a path so congested that none of an entity's packets
    /// arrive would never report to it. Receivers that never reported (no
    /// Seawall there) are not second-guessed. Returns how many entities were
    /// silent; call it every period.
    pub fn check_silence(&mut self, now_ns: u64) -> usize {
        let cfg = self.cfg;
        let limit = cfg.period_ns.saturating_mul(SILENCE_PERIODS);
        let mut n = 0;
        for (e, p) in self.paths.iter_mut() {
            if p.last_report.is_none()
                || p.period_bytes == 0
                || now_ns.saturating_sub(p.period_start_ns) <= limit
            {
                continue;
            }
            let weight = self.weights.get(&e.port).copied().unwrap_or(1);
            for l in p.links.as_slice() {
                if let Some(c) = self.links.get_mut(&(e.port, *l)) {
                    let all_lost = PathFeedback {
                        congested: true,
                        received: 0,
                        lost: 0,
                    };
                    c.feedback(&cfg, e.host, all_lost, weight, now_ns);
                }
            }
            p.period_bytes = 0;
            p.period_start_ns = now_ns;
            n += 1;
        }
        n
    }

    /// Forgets entities idle for longer than the configured time, and the
    /// controllers of links no entity crosses any more (bounded memory under
    /// VM churn); call now and then.
    pub fn expire(&mut self, now_ns: u64) {
        let idle = self.cfg.idle_ns;
        self.paths
            .retain(|_, p| !p.queue.is_empty() || now_ns.saturating_sub(p.last_sent_ns) < idle);
        let paths = &self.paths;
        self.links.retain(|(port, l), c| {
            now_ns.saturating_sub(c.last_sent_ns) < idle
                || paths
                    .iter()
                    .any(|(e, p)| e.port == *port && p.links.as_slice().contains(l))
        });
        let period = self.cfg.period_ns;
        for c in self.links.values_mut() {
            c.clean
                .retain(|&(_, t, _)| now_ns.saturating_sub(t) < period);
        }
    }

    /// The rate of `e` now: the least of its path's links (None: not known).
    pub fn rate_bps(&self, e: Entity) -> Option<u64> {
        let p = self.paths.get(&e)?;
        p.links
            .as_slice()
            .iter()
            .filter_map(|l| self.links.get(&(e.port, *l)).map(|c| c.rate_bps))
            .min()
    }

    /// Every (port, link) controller: its rate and how often it was cut, in
    /// (port, link) order.
    pub fn links(&self) -> Vec<(u16, Link, u64, u64)> {
        let mut v: Vec<_> = self
            .links
            .iter()
            .map(|((p, l), c)| (*p, *l, c.rate_bps, c.decreases))
            .collect();
        v.sort_by_key(|x| (x.0, x.1));
        v
    }

    /// The rate of `port` on `link` now (None: no such controller).
    pub fn link_rate_bps(&self, port: u16, link: Link) -> Option<u64> {
        self.links.get(&(port, link)).map(|c| c.rate_bps)
    }

    /// Every entity with its rate (the least of its path's links) and
    /// counters (`decreases`: the cuts of the links on its path), in entity
    /// order.
    pub fn entities(&self) -> Vec<(Entity, u64, EntityStats)> {
        let mut v: Vec<_> = self
            .paths
            .iter()
            .map(|(e, p)| {
                let mut st = p.stats;
                st.queue_packets_now = p.queue.len() as u64;
                st.queue_bytes_now = p.queue.bytes() as u64;
                st.weight = self.weights.get(&e.port).copied().unwrap_or(1);
                let ctls = p
                    .links
                    .as_slice()
                    .iter()
                    .filter_map(|l| self.links.get(&(e.port, *l)));
                st.decreases = ctls.clone().map(|c| c.decreases).sum();
                let rate = ctls
                    .map(|c| c.rate_bps)
                    .min()
                    .unwrap_or(self.cfg.max_rate_bps);
                (*e, rate, st)
            })
            .collect();
        v.sort_by_key(|x| x.0);
        v
    }

    /// Bucket depth at `rate_bps` (for reports).
    pub fn bucket_depth(&self, rate_bps: u64) -> u64 {
        depth(&self.cfg, rate_bps)
    }
}

/// What the receiver tracks of one sending entity.
#[derive(Debug, Clone, Copy, Default)]
struct Track {
    next_seq: u32,
    received: u32,
    lost: u32,
    dirty: bool,
    /// When its last packet came.
    last_ns: u64,
}

/// Sequence gaps larger than this (forwards or backwards) are a sender that
/// restarted, not loss.
const RESYNC: u32 = 1 << 20;
/// A packet up to this far behind the expected sequence is a late one counted
/// lost before: it is taken off the loss count.
const REORDER: u32 = 1024;

/// The receiving side: loss and arrival counts per (sending host, port), and
/// the feedback messages that report them.
#[derive(Debug, Clone, Default)]
pub struct Receiver {
    tracks: HashMap<(u32, u16), Track>,
    period_ns: u64,
    due_ns: Option<u64>,
    reports: Vec<Report>,
    hosts: Vec<u32>,
    /// Packets of some sender were found missing, or queued on the way
    /// longer than the threshold, since the last feedback.
    period_lost: bool,
    /// One-way delay above the least seen that counts as congestion, µs (0: off).
    delay_threshold_us: u32,
    /// Least one-way delay seen per sending host (µs, the two clocks' offset
    /// included): this window's and the previous one's, and when this one began.
    base: HashMap<u32, (u32, u32, u64)>,
    /// The least queueing delay of any packet since the last feedback, µs.
    /// The least, not any: a packet that waited for the receiving agent to be
    /// scheduled (a loaded host) says nothing of the path, but when even the
    /// least delayed packet of a period waited, a queue stands on the way.
    period_min_queued: Option<i32>,
    /// Periods whose delay said "congested" (for reports).
    delayed: u64,
    /// Whether the last feedback reported congestion.
    last_congested: bool,
}

/// What [`Receiver::on_packet`] learned from a packet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Arrival {
    /// Packets found missing before it (its sequence gap).
    pub lost: u32,
    /// It is the first packet of its (host, port) heard of.
    pub new_entity: bool,
}

/// How long a window of the least one-way delay lasts, ns: the least of this
/// and the previous window is the base, so it follows clock drift and route
/// changes within two windows.
const BASE_WINDOW_NS: u64 = 10_000_000_000;

impl Receiver {
    /// A receiver reporting every `period_ns`, flagging congestion on loss and
    /// on one-way delays `queue_delay_ns` above the least seen (0: loss only).
    pub fn new(period_ns: u64, queue_delay_ns: u64) -> Receiver {
        Receiver {
            period_ns: period_ns.max(1),
            delay_threshold_us: (queue_delay_ns / 1000).min(u32::MAX as u64 / 4) as u32,
            ..Receiver::default()
        }
    }

    /// Feedback periods flagged congested by delay (not loss) so far.
    pub fn delayed_periods(&self) -> u64 {
        self.delayed
    }

    /// Counts packet `seq` of `port` on host `host`, sent at `sent_us` of the
    /// sender's clock (µs, wrapping; None: no time in the packet).
    pub fn on_packet(
        &mut self,
        host: u32,
        port: u16,
        seq: u32,
        sent_us: Option<u32>,
        now_ns: u64,
    ) -> Arrival {
        if let (Some(sent), true) = (sent_us, self.delay_threshold_us > 0) {
            let owd = ((now_ns / 1000) as u32).wrapping_sub(sent);
            let b = self.base.entry(host).or_insert((owd, owd, now_ns));
            if now_ns.saturating_sub(b.2) >= BASE_WINDOW_NS {
                *b = (owd, b.0, now_ns);
            }
            // Wrapping differences: the two clocks need not agree.
            if (owd.wrapping_sub(b.0) as i32) < 0 {
                b.0 = owd;
            }
            let base = if (b.1.wrapping_sub(b.0) as i32) < 0 {
                b.1
            } else {
                b.0
            };
            let queued = owd.wrapping_sub(base) as i32;
            self.period_min_queued = Some(self.period_min_queued.map_or(queued, |m| m.min(queued)));
        }
        let mut arrival = Arrival::default();
        let t = self.tracks.entry((host, port)).or_insert_with(|| {
            arrival.new_entity = true;
            Track {
                next_seq: seq,
                ..Track::default()
            }
        });
        let ahead = seq.wrapping_sub(t.next_seq);
        if ahead < RESYNC {
            self.period_lost |= ahead > 0;
            t.lost = t.lost.wrapping_add(ahead);
            t.next_seq = seq.wrapping_add(1);
            arrival.lost = ahead;
        } else {
            let behind = t.next_seq.wrapping_sub(seq);
            if behind <= REORDER {
                // Late: it was counted lost when the ones after it came.
                if t.lost > 0 {
                    t.lost -= 1;
                }
            } else {
                // The sender started over.
                t.next_seq = seq.wrapping_add(1);
            }
        }
        t.received = t.received.wrapping_add(1);
        t.dirty = true;
        t.last_ns = now_ns;
        if self.due_ns.is_none() {
            self.due_ns = Some(now_ns + self.period_ns);
        }
        arrival
    }

    /// Whether the last feedback sent reported congestion (for
    /// [`audit::Auditor::end_period`]).
    pub fn last_congested(&self) -> bool {
        self.last_congested
    }

    /// When feedback is next due (None: nothing to report).
    pub fn next_deadline(&self) -> Option<u64> {
        self.due_ns
    }

    /// If feedback is due at `now_ns`, calls `emit(host, message)` once per
    /// message (one or more per sending host with news); returns how many.
    pub fn feedback(
        &mut self,
        now_ns: u64,
        buf: &mut Vec<u8>,
        mut emit: impl FnMut(u32, &[u8]),
    ) -> usize {
        match self.due_ns {
            Some(d) if d <= now_ns => {}
            _ => return 0,
        }
        self.due_ns = None;
        let delayed = self
            .period_min_queued
            .take()
            .is_some_and(|q| self.delay_threshold_us > 0 && q > self.delay_threshold_us as i32);
        self.delayed += u64::from(delayed);
        let congested = std::mem::take(&mut self.period_lost) || delayed;
        self.last_congested = congested;
        self.hosts.clear();
        self.hosts.extend(
            self.tracks
                .iter()
                .filter(|(_, t)| t.dirty)
                .map(|((h, _), _)| *h),
        );
        self.hosts.sort_unstable();
        self.hosts.dedup();
        let mut sent = 0;
        for hi in 0..self.hosts.len() {
            let host = self.hosts[hi];
            self.reports.clear();
            for ((h, port), t) in self.tracks.iter_mut() {
                if *h == host && t.dirty {
                    t.dirty = false;
                    self.reports.push(Report {
                        port: *port,
                        received: t.received,
                        lost: t.lost,
                        next_seq: t.next_seq,
                        congested,
                    });
                }
            }
            self.reports.sort_unstable_by_key(|r| r.port);
            for chunk in self.reports.chunks(wire::MAX_REPORTS) {
                buf.clear();
                wire::encode_feedback(chunk, buf);
                emit(host, buf);
                sent += 1;
            }
        }
        sent
    }

    /// Forgets senders (and hosts' delay bases) heard nothing from for
    /// `idle_ns`: bounded memory under VM churn. A sender that comes back
    /// starts a new track (no loss is counted across the gap).
    pub fn expire(&mut self, now_ns: u64, idle_ns: u64) {
        self.tracks
            .retain(|_, t| t.dirty || now_ns.saturating_sub(t.last_ns) < idle_ns);
        let tracks = &self.tracks;
        self.base
            .retain(|h, _| tracks.keys().any(|(th, _)| th == h));
    }

    /// Forgets every sender of `host` (it left the fabric).
    pub fn forget_host(&mut self, host: u32) {
        self.tracks.retain(|(h, _), _| *h != host);
        self.base.remove(&host);
    }

    /// Senders tracked.
    pub fn len(&self) -> usize {
        self.tracks.len()
    }

    /// True when no sender is tracked.
    pub fn is_empty(&self) -> bool {
        self.tracks.is_empty()
    }
}

#[cfg(test)]
mod tests;
