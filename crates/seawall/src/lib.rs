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

pub mod wire;

use std::collections::HashMap;

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
    /// Multiplicative decrease on loss: the new rate is the measured sending
    /// rate times `1 - decrease`.
    pub decrease: f64,
    /// Depth of an entity's token bucket, as time at its rate, ns.
    pub burst_ns: u64,
    /// Least depth of the bucket, bytes (a few frames, so a low rate still
    /// passes whole frames).
    pub min_burst_bytes: u64,
    /// An entity that sent nothing for this long is forgotten, ns.
    pub idle_ns: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            period_ns: 5_000_000,
            min_rate_bps: 2_000_000,
            max_rate_bps: 100_000_000_000,
            increase_bps: 10_000_000,
            decrease: 0.3,
            burst_ns: 2_000_000,
            min_burst_bytes: 16 * 1024,
            idle_ns: 10_000_000_000,
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
        Ok(())
    }
}

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
    last_sent_ns: u64,
    /// The last report's cumulative counters (None: no report yet).
    last_report: Option<(u32, u32)>,
    stats: EntityStats,
}

/// The sending side: one controller per entity.
#[derive(Debug, Clone)]
pub struct Sender {
    cfg: Config,
    entities: HashMap<Entity, Controller>,
    /// The entity of the previous packet, for runs of one entity's packets.
    last: Option<Entity>,
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
            last: None,
        }
    }

    /// The parameters.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    fn depth(&self, rate_bps: u64) -> u64 {
        let at_rate = (rate_bps as u128 * self.cfg.burst_ns as u128 / 8_000_000_000) as u64;
        at_rate.max(self.cfg.min_burst_bytes)
    }

    /// Decides whether `port`'s packet of `len` bytes to `host` may leave now.
    pub fn admit(&mut self, port: u16, host: u32, len: usize, now_ns: u64) -> Admit {
        let key = Entity { port, host };
        let cfg = self.cfg;
        let depth_of = |rate: u64| {
            ((rate as u128 * cfg.burst_ns as u128 / 8_000_000_000) as u64).max(cfg.min_burst_bytes)
        };
        let c = self.entities.entry(key).or_insert_with(|| Controller {
            rate_bps: cfg.max_rate_bps,
            tokens: depth_of(cfg.max_rate_bps),
            refilled_ns: now_ns,
            seq: 0,
            period_bytes: 0,
            period_policed: false,
            period_start_ns: now_ns,
            last_sent_ns: now_ns,
            last_report: None,
            stats: EntityStats::default(),
        });
        self.last = Some(key);
        let dt = now_ns.saturating_sub(c.refilled_ns);
        if dt > 0 {
            let add = (c.rate_bps as u128 * dt as u128 / 8_000_000_000) as u64;
            // Whole bytes only: the remainder of the interval stays unrefilled.
            if add > 0 {
                c.tokens = (c.tokens + add).min(depth_of(c.rate_bps));
                c.refilled_ns = now_ns;
            }
        }
        let len64 = len as u64;
        c.last_sent_ns = now_ns;
        if c.tokens < len64 {
            c.period_policed = true;
            c.stats.policed_packets += 1;
            c.stats.policed_bytes += len64;
            return Admit::Police;
        }
        c.tokens -= len64;
        c.period_bytes += len64;
        c.stats.admitted_packets += 1;
        c.stats.admitted_bytes += len64;
        let s = c.seq;
        c.seq = c.seq.wrapping_add(1);
        Admit::Send(s)
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
            if d_lost > 0 {
                // Decrease from what the entity really sent, not from an
                // allowance it never used.
                let base = c.rate_bps.min(sent_bps.max(cfg.min_rate_bps));
                let cut = (base as f64 * (1.0 - cfg.decrease)) as u64;
                c.rate_bps = cut.max(cfg.min_rate_bps);
                c.stats.decreases += 1;
            } else if c.period_policed
                || sent_bps.saturating_mul(10) >= c.rate_bps.saturating_mul(9)
            {
                c.rate_bps = c
                    .rate_bps
                    .saturating_add(cfg.increase_bps)
                    .min(cfg.max_rate_bps);
            }
            let depth = ((c.rate_bps as u128 * cfg.burst_ns as u128 / 8_000_000_000) as u64)
                .max(cfg.min_burst_bytes);
            c.tokens = c.tokens.min(depth);
            c.period_bytes = 0;
            c.period_policed = false;
            c.period_start_ns = now_ns;
        }
    }

    /// Forgets entities idle for longer than the configured time (bounded
    /// memory under VM churn); call now and then.
    pub fn expire(&mut self, now_ns: u64) {
        let idle = self.cfg.idle_ns;
        self.entities
            .retain(|_, c| now_ns.saturating_sub(c.last_sent_ns) < idle);
        self.last = None;
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
            .map(|(e, c)| (*e, c.rate_bps, c.stats))
            .collect();
        v.sort_by_key(|x| x.0);
        v
    }

    /// Bucket depth at `rate_bps` (for reports).
    pub fn bucket_depth(&self, rate_bps: u64) -> u64 {
        self.depth(rate_bps)
    }
}

/// What the receiver tracks of one sending entity.
#[derive(Debug, Clone, Copy, Default)]
struct Track {
    next_seq: u32,
    received: u32,
    lost: u32,
    dirty: bool,
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
}

impl Receiver {
    /// A receiver reporting every `period_ns`.
    pub fn new(period_ns: u64) -> Receiver {
        Receiver {
            period_ns: period_ns.max(1),
            ..Receiver::default()
        }
    }

    /// Counts packet `seq` of `port` on host `host`.
    pub fn on_packet(&mut self, host: u32, port: u16, seq: u32, now_ns: u64) {
        let t = self.tracks.entry((host, port)).or_insert(Track {
            next_seq: seq,
            ..Track::default()
        });
        let ahead = seq.wrapping_sub(t.next_seq);
        if ahead < RESYNC {
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

    /// Forgets every sender of `host` (it left the fabric).
    pub fn forget_host(&mut self, host: u32) {
        self.tracks.retain(|(h, _), _| *h != host);
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
