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
//! What differs from the paper: the path of an entity is its destination host
//! (Sluice's fabric has one path between two hosts; with ECMP the key would
//! add the path), and the control law is a plain AIMD on the measured sending
//! rate (the paper leaves the algorithm open: "any rate control algorithm,
//! such as TCP, TFRC, or QCN").

#![forbid(unsafe_code)]

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

/// One entity's controller.
#[derive(Debug, Clone)]
struct Controller {
    rate_bps: u64,
    /// Bytes that may be sent now.
    tokens: u64,
    refilled_ns: u64,
    /// Sequence number of the next packet.
    seq: u32,
    /// Bytes admitted and whether anything was policed since the last report.
    period_bytes: u64,
    period_policed: bool,
    period_start_ns: u64,
    /// Highest sending rate of recent reports, decaying by 1/8 per report.
    peak_bps: u64,
    last_sent_ns: u64,
    /// The last report's cumulative counters (None: no report yet).
    last_report: Option<(u32, u32)>,
    stats: EntityStats,
    /// Packets waiting for tokens (allocated at the first wait).
    queue: Fifo,
}

impl Controller {
    fn new(cfg: &Config, now_ns: u64) -> Controller {
        Controller {
            rate_bps: cfg.max_rate_bps,
            tokens: depth(cfg, cfg.max_rate_bps),
            refilled_ns: now_ns,
            seq: 0,
            period_bytes: 0,
            period_policed: false,
            period_start_ns: now_ns,
            peak_bps: 0,
            last_sent_ns: now_ns,
            last_report: None,
            stats: EntityStats::default(),
            queue: Fifo::default(),
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

    /// Takes `len` bytes' tokens and numbers the packet.
    fn send(&mut self, len: u64) -> u32 {
        self.tokens -= len;
        self.period_bytes += len;
        self.stats.admitted_packets += 1;
        self.stats.admitted_bytes += len;
        let s = self.seq;
        self.seq = self.seq.wrapping_add(1);
        s
    }

    fn drop_one(&mut self, len: u64) {
        self.period_policed = true;
        self.stats.policed_packets += 1;
        self.stats.policed_bytes += len;
    }

    /// When the queue's first packet will have its tokens.
    fn ready_at(&self) -> Option<u64> {
        let (_, d) = self.queue.front()?;
        let need = (d.len() as u64).saturating_sub(self.tokens);
        if need == 0 {
            return Some(self.refilled_ns);
        }
        let ns = (need as u128 * 8_000_000_000).div_ceil(self.rate_bps.max(1) as u128) as u64;
        Some(self.refilled_ns + ns)
    }
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

/// The sending side: one controller per entity.
#[derive(Debug, Clone)]
pub struct Sender {
    cfg: Config,
    entities: HashMap<Entity, Controller>,
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
            entities: HashMap::new(),
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
        let c = self
            .entities
            .entry(Entity { port, host })
            .or_insert_with(|| Controller::new(&cfg, now_ns));
        c.refill(&cfg, now_ns);
        c.last_sent_ns = now_ns;
        let len = len as u64;
        if c.tokens < len {
            c.drop_one(len);
            return Admit::Police;
        }
        Admit::Send(c.send(len))
    }

    /// Like [`Sender::admit`], but a packet over the rate waits in the
    /// entity's queue (up to [`Config::queue_bytes`]) instead of being
    /// dropped; `tag` is the caller's, handed back with it by
    /// [`Sender::release`]. Packets of one entity leave in the order offered.
    pub fn offer(&mut self, port: u16, host: u32, tag: u64, frame: &[u8], now_ns: u64) -> Offer {
        let cfg = self.cfg;
        let key = Entity { port, host };
        let c = self
            .entities
            .entry(key)
            .or_insert_with(|| Controller::new(&cfg, now_ns));
        c.refill(&cfg, now_ns);
        c.last_sent_ns = now_ns;
        let len = frame.len() as u64;
        if c.queue.is_empty() && c.tokens >= len {
            return Offer::Send(c.send(len));
        }
        if cfg.queue_bytes == 0 {
            c.drop_one(len);
            return Offer::Dropped;
        }
        if c.queue.is_empty() {
            // It starts waiting (the buffer is allocated at its first wait).
            if c.queue.capacity() == 0 {
                c.queue = Fifo::new(cfg.queue_bytes);
            }
            self.waiting.push(key);
        }
        if c.queue.push(tag, frame) {
            c.period_policed = true;
            c.stats.queued_packets += 1;
            Offer::Queued
        } else {
            c.drop_one(len);
            Offer::Dropped
        }
    }

    /// Hands back, in order, every queued packet whose tokens have come:
    /// `emit(entity, sequence, tag, frame)`; returns how many.
    pub fn release(&mut self, now_ns: u64, mut emit: impl FnMut(Entity, u32, u64, &[u8])) -> usize {
        let cfg = self.cfg;
        let mut n = 0;
        let mut k = 0;
        while k < self.waiting.len() {
            let key = self.waiting[k];
            let Some(c) = self.entities.get_mut(&key) else {
                self.waiting.swap_remove(k);
                continue;
            };
            c.refill(&cfg, now_ns);
            while let Some(len) = c.queue.front().map(|(_, d)| d.len() as u64) {
                if c.tokens < len {
                    break;
                }
                // Numbered when it leaves, so the receiver sees no gap for
                // the time it waited.
                let s = c.send(len);
                if let Some((tag, d)) = c.queue.front() {
                    emit(key, s, tag, d);
                }
                c.queue.pop();
                n += 1;
            }
            if c.queue.is_empty() {
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
            .filter_map(|k| self.entities.get(k).and_then(Controller::ready_at))
            .min()
    }

    /// Applies a feedback message from `host`: each report's port is one of
    /// this host's entities sending to `host`. Reports of unknown ports are
    /// ignored (the entity was forgotten, or the report is stale).
    pub fn on_feedback(
        &mut self,
        host: u32,
        reports: impl IntoIterator<Item = Report>,
        now_ns: u64,
    ) {
        for r in reports {
            let cfg = self.cfg;
            let weight = self.weights.get(&r.port).copied().unwrap_or(1);
            let Some(c) = self.entities.get_mut(&Entity { port: r.port, host }) else {
                continue;
            };
            let (d_recv, d_lost) = match c.last_report {
                Some((rr, rl)) => (r.received.wrapping_sub(rr), r.lost.wrapping_sub(rl)),
                None => (r.received, r.lost),
            };
            c.last_report = Some((r.received, r.lost));
            // A report can only count packets that were sent: anything else is
            // a receiver that restarted, or garbage; start over from it.
            let sent = c.stats.admitted_packets;
            if u64::from(d_recv) + u64::from(d_lost) > sent.max(1) * 2 {
                continue;
            }
            c.stats.feedbacks += 1;
            c.stats.reported_received += u64::from(d_recv);
            c.stats.reported_lost += u64::from(d_lost);
            let elapsed = now_ns.saturating_sub(c.period_start_ns).max(1);
            let sent_bps = (c.period_bytes as u128 * 8_000_000_000 / elapsed as u128) as u64;
            c.peak_bps = sent_bps.max(c.peak_bps - c.peak_bps / 8);
            if d_lost > 0 || r.congested {
                // Cut the allowance, but from no higher than twice the recent
                // peak of what the entity sent: an allowance it never used (a
                // new entity's) would make the cut toothless. Not from this
                // period's rate: a TCP sender that just halved its window, or
                // sits out a retransmission timeout, would drag its own
                // allowance down with it, cut after cut, while a flooder's
                // stays.
                let base = c
                    .rate_bps
                    .min(c.peak_bps.saturating_mul(2).max(cfg.min_rate_bps));
                let cut = (base as f64 * (1.0 - cfg.decrease)) as u64;
                c.rate_bps = cut.max(cfg.min_rate_bps);
                c.stats.decreases += 1;
            } else {
                // No loss on the path: probe for more, like a TCP sender's
                // additive increase. Whether the entity used its allowance
                // does not matter: a TCP sender inside it that backed off
                // after a loss must get its share back, and an allowance
                // never used is cut to twice the recent peak at the next loss.
                // The step follows time, not reports: an entity reports only
                // when its packets arrive, and one that sends less often (a
                // TCP sender waiting out a timeout) must not grow slower than
                // a flooder that reports every period.
                let periods = (elapsed as f64 / cfg.period_ns as f64).clamp(0.0, MAX_CATCH_UP);
                let step = (cfg.increase_bps as f64 * periods * f64::from(weight)) as u64;
                c.rate_bps = c.rate_bps.saturating_add(step).min(cfg.max_rate_bps);
            }
            c.tokens = c.tokens.min(depth(&cfg, c.rate_bps));
            c.period_bytes = 0;
            c.period_policed = false;
            c.period_start_ns = now_ns;
        }
    }

    /// An entity that has sent since its last report but heard nothing for
    /// [`SILENCE_PERIODS`] periods, from a receiver that did report before,
    /// takes the silence as loss of everything (as a TCP sender takes a
    /// retransmission timeout): its rate is cut. Without this, a path so
    /// congested that none of an entity's packets arrive would never report
    /// to it. Receivers that never reported (no Seawall there) are not
    /// second-guessed. Returns how many were cut; call it every loop.
    pub fn check_silence(&mut self, now_ns: u64) -> usize {
        let cfg = self.cfg;
        let limit = cfg.period_ns.saturating_mul(SILENCE_PERIODS);
        let mut n = 0;
        for c in self.entities.values_mut() {
            if c.last_report.is_none()
                || c.period_bytes == 0
                || now_ns.saturating_sub(c.period_start_ns) <= limit
            {
                continue;
            }
            let base = c
                .rate_bps
                .min(c.peak_bps.saturating_mul(2).max(cfg.min_rate_bps));
            c.rate_bps = ((base as f64 * (1.0 - cfg.decrease)) as u64).max(cfg.min_rate_bps);
            c.tokens = c.tokens.min(depth(&cfg, c.rate_bps));
            c.stats.decreases += 1;
            c.period_bytes = 0;
            c.period_policed = false;
            c.period_start_ns = now_ns;
            n += 1;
        }
        n
    }

    /// Forgets entities idle for longer than the configured time (bounded
    /// memory under VM churn); call now and then.
    pub fn expire(&mut self, now_ns: u64) {
        let idle = self.cfg.idle_ns;
        self.entities
            .retain(|_, c| !c.queue.is_empty() || now_ns.saturating_sub(c.last_sent_ns) < idle);
    }

    /// The rate of `e` now (None: not known).
    pub fn rate_bps(&self, e: Entity) -> Option<u64> {
        self.entities.get(&e).map(|c| c.rate_bps)
    }

    /// Every entity with its rate and counters, in entity order.
    pub fn entities(&self) -> Vec<(Entity, u64, EntityStats)> {
        let mut v: Vec<_> = self
            .entities
            .iter()
            .map(|(e, c)| {
                let mut st = c.stats;
                st.queue_packets_now = c.queue.len() as u64;
                st.queue_bytes_now = c.queue.bytes() as u64;
                st.weight = self.weights.get(&e.port).copied().unwrap_or(1);
                (*e, c.rate_bps, st)
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
    pub fn on_packet(&mut self, host: u32, port: u16, seq: u32, sent_us: Option<u32>, now_ns: u64) {
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
        let t = self.tracks.entry((host, port)).or_insert(Track {
            next_seq: seq,
            ..Track::default()
        });
        let ahead = seq.wrapping_sub(t.next_seq);
        if ahead < RESYNC {
            self.period_lost |= ahead > 0;
            t.lost = t.lost.wrapping_add(ahead);
            t.next_seq = seq.wrapping_add(1);
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
