//! Checking that other hosts obey the feedback this host sends them (Seawall
//! §4, "Tolerating Compromised Hypervisors"): a sending host's rate controller
//! runs in its agent, so a subverted agent can simply stop slowing down. The
//! receiving host cannot see the sender's controller, but it knows what the
//! controller must do: every period the receiver reports congestion, an
//! honest controller cuts the rates of that path's entities by `decrease`,
//! from no higher than twice the recent peak of what they sent
//! (`Sender::on_feedback`). So after a reaction time (the feedback's trip
//! and the sender's one-decision-per-period), what arrives from that host
//! plus what it lost on the way must fall, period after period, under
//!
//! ```text
//! allowance(k) = slack * max(floor, 2 (1 - decrease) * peak * (1 - decrease)^(k - lag))
//! ```
//!
//! where `peak` is the host's decaying peak sending rate when the congestion
//! began (the sender's own rule, measured at the receiver) and `k` counts the
//! congested periods since. A host whose traffic stays above its allowance
//! for `strikes` periods in a row is accused ([`Accusation`]); traffic with no
//! sequence numbers (a host whose rate controller is off, or that sends
//! Geneve straight onto the fabric) counts like any other, so it cannot hide
//! by not numbering its packets.
//!
//! Honest hosts are not accused: their rate falls faster than the allowance
//! (the allowance uses the sender's own law, with `slack` on top), and a
//! congestion episode among honest senders ends within a few periods (each
//! cut shrinks the total by `decrease`), resetting the count. The floor keeps
//! small senders out of it: a host sending under it harms nobody worth
//! accusing it for. A sender that starts new entities mid-episode (new
//! entities start unlimited until their first report) restarts its episode,
//! at most once per [`RESTART_EVERY`] periods, so cycling port numbers does
//! not buy a flooder unbounded restarts.
//!
//! Sans-IO like the rest of the crate: packets are told with
//! [`Auditor::on_data`], period ends with [`Auditor::end_period`], time with
//! [`Auditor::tick`].

use std::collections::HashMap;

use crate::Config;

/// Periods between two episode restarts of one host for new entities.
pub const RESTART_EVERY: u32 = 50;

/// The auditor's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AuditConfig {
    /// The senders' multiplicative decrease (their [`Config::decrease`]).
    pub decrease: f64,
    /// Congested periods before the allowance starts to fall: the feedback's
    /// trip and the sender's once-per-period decision.
    pub lag_periods: u32,
    /// Periods in a row over the allowance before a host is accused.
    pub strikes: u32,
    /// Factor over the honest law's bound (measurement noise, bursts).
    pub slack: f64,
    /// Allowance below which no host is judged, bits/s.
    pub floor_bps: u64,
    /// An accused host within its allowance this long is no longer accused, ns.
    pub forgive_ns: u64,
}

impl AuditConfig {
    /// The auditor of senders running `c` (the fleet's Seawall parameters).
    pub fn for_senders(c: &Config) -> AuditConfig {
        AuditConfig {
            decrease: c.decrease,
            lag_periods: 3,
            strikes: 40,
            slack: 1.5,
            floor_bps: (c.min_rate_bps * 5).max(10_000_000),
            forgive_ns: 10_000_000_000,
        }
    }
}

/// A host found sending more than the feedback it got allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accusation {
    /// The sending host.
    pub host: u32,
    /// When it was accused (the auditor's clock), ns.
    pub since_ns: u64,
    /// What it sent in the period that made the last strike, bits/s.
    pub rate_bps: u64,
    /// What it was allowed then, bits/s.
    pub allowance_bps: u64,
    /// Congested periods it had been told of, in a row, by then.
    pub congested_periods: u32,
}

/// One sending host's audit.
#[derive(Debug, Clone, Default)]
struct HostAudit {
    /// Bytes that arrived, and bytes lost on the way (sequence gaps times
    /// the packet that revealed them), this period.
    bytes: u64,
    /// Entities new this period.
    new_entities: bool,
    /// Decaying peak of its sending rate (the sender's rule), bits/s.
    peak_bps: f64,
    /// Congested periods in a row it sent in.
    run: u32,
    /// The peak when the run (or its last restart) began.
    onset_bps: f64,
    /// Periods since the run last restarted.
    since_restart: u32,
    /// Periods in a row over the allowance.
    strikes: u32,
    /// When it was last over its allowance.
    last_over_ns: u64,
    /// When it last sent anything.
    last_seen_ns: u64,
}

/// The receiving side's check of other hosts' rate controllers.
#[derive(Debug, Clone)]
pub struct Auditor {
    cfg: AuditConfig,
    hosts: HashMap<u32, HostAudit>,
    /// When the last period ended.
    last_end_ns: Option<u64>,
    /// Hosts accused and not forgiven, by host id (few: a short list).
    accused: Vec<Accusation>,
}

impl Auditor {
    /// An auditor with `cfg`.
    pub fn new(cfg: AuditConfig) -> Auditor {
        Auditor {
            cfg,
            hosts: HashMap::new(),
            last_end_ns: None,
            accused: Vec::new(),
        }
    }

    /// Its parameters.
    pub fn config(&self) -> &AuditConfig {
        &self.cfg
    }

    /// Counts a data packet of `bytes` from `host`; `lost` packets were found
    /// missing before it (its sequence gap; 0 for an unnumbered packet), and
    /// `new_entity` says it is the first packet of a (host, port) entity.
    pub fn on_data(&mut self, host: u32, bytes: usize, lost: u32, new_entity: bool, now_ns: u64) {
        let h = self.hosts.entry(host).or_default();
        // A gap of a whole sequence space is a restart, not loss: count
        // at most a period's worth of loss per packet.
        let lost = u64::from(lost.min(1024));
        h.bytes = h
            .bytes
            .saturating_add((bytes as u64).saturating_mul(1 + lost));
        h.new_entities |= new_entity;
        h.last_seen_ns = now_ns;
    }

    /// Ends a period at `now_ns`; `congested` says whether this host reported
    /// congestion for it (loss or queueing on the way in). Returns how many
    /// hosts were newly accused.
    pub fn end_period(&mut self, now_ns: u64, congested: bool) -> usize {
        let Some(last) = self.last_end_ns.replace(now_ns) else {
            for h in self.hosts.values_mut() {
                h.bytes = 0;
            }
            return 0;
        };
        let elapsed = now_ns.saturating_sub(last).max(1) as f64;
        let cfg = self.cfg;
        let keep = 1.0 - cfg.decrease;
        let mut accused = 0;
        for (&id, h) in self.hosts.iter_mut() {
            let bytes = std::mem::take(&mut h.bytes);
            let new = std::mem::take(&mut h.new_entities);
            let rate = bytes as f64 * 8e9 / elapsed;
            // The sender's own peak rule: a peak decaying by an eighth a
            // period, measured before this period's cut takes effect.
            let before = h.peak_bps;
            h.peak_bps = rate.max(h.peak_bps - h.peak_bps / 8.0);
            if !congested || bytes == 0 {
                h.run = 0;
                h.strikes = 0;
                continue;
            }
            h.since_restart = h.since_restart.saturating_add(1);
            if h.run == 0 || (new && h.since_restart >= RESTART_EVERY) {
                h.run = 0;
                h.onset_bps = before.max(rate);
                h.since_restart = 0;
            }
            h.run += 1;
            if h.run <= cfg.lag_periods {
                continue;
            }
            let cuts = (h.run - cfg.lag_periods) as i32;
            let law = 2.0 * keep * h.onset_bps * keep.powi(cuts - 1);
            let allowance = cfg.slack * law.max(cfg.floor_bps as f64);
            if rate <= allowance {
                h.strikes = 0;
                continue;
            }
            h.strikes += 1;
            h.last_over_ns = now_ns;
            if h.strikes < cfg.strikes {
                continue;
            }
            let a = Accusation {
                host: id,
                since_ns: now_ns,
                rate_bps: rate as u64,
                allowance_bps: allowance as u64,
                congested_periods: h.run,
            };
            match self.accused.iter_mut().find(|x| x.host == id) {
                Some(x) => {
                    // Still at it: the evidence is kept current.
                    x.rate_bps = a.rate_bps;
                    x.allowance_bps = a.allowance_bps;
                    x.congested_periods = a.congested_periods;
                }
                None => {
                    self.accused.push(a);
                    accused += 1;
                }
            }
        }
        accused
    }

    /// Forgives accused hosts within their allowance for
    /// [`AuditConfig::forgive_ns`] and forgets hosts silent that long;
    /// returns how many were forgiven.
    pub fn tick(&mut self, now_ns: u64) -> usize {
        let forgive = self.cfg.forgive_ns;
        let hosts = &self.hosts;
        let before = self.accused.len();
        self.accused.retain(|a| {
            let over = hosts.get(&a.host).map_or(0, |h| h.last_over_ns);
            now_ns.saturating_sub(over.max(a.since_ns)) < forgive
        });
        let accused = &self.accused;
        self.hosts.retain(|id, h| {
            now_ns.saturating_sub(h.last_seen_ns) < forgive || accused.iter().any(|a| a.host == *id)
        });
        before - self.accused.len()
    }

    /// Whether `host` is accused (its packets to this host are then dropped
    /// by the caller: the incremental sandbox).
    pub fn is_accused(&self, host: u32) -> bool {
        !self.accused.is_empty() && self.accused.iter().any(|a| a.host == host)
    }

    /// The hosts accused now.
    pub fn accusations(&self) -> &[Accusation] {
        &self.accused
    }

    /// Drops every accusation and count of `host` (the operator cleared it,
    /// or it left the fabric).
    pub fn forget_host(&mut self, host: u32) {
        self.hosts.remove(&host);
        self.accused.retain(|a| a.host != host);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Offer, Receiver, Sender};

    const PERIOD: u64 = 5_000_000;
    const PKT: usize = 1500;

    fn cfg() -> Config {
        Config::default()
    }

    /// One host's traffic into a shared bottleneck, as the receiver sees it.
    struct Link {
        capacity_bps: f64,
    }

    /// A sending host: `Some(sender)` obeys feedback, `None` ignores it.
    struct Host {
        id: u32,
        port: u16,
        sender: Option<Sender>,
        demand_bps: f64,
        seq: u32,
        /// Fractional packets carried over between periods.
        carry: f64,
    }

    impl Host {
        fn new(id: u32, obeys: bool, demand_bps: f64) -> Host {
            Host {
                id,
                port: 1,
                sender: obeys.then(|| Sender::new(cfg())),
                demand_bps,
                seq: 0,
                carry: 0.0,
            }
        }

        /// Packets it offers this period, and those its controller lets out.
        fn send(&mut self, now: u64) -> u32 {
            self.carry += self.demand_bps * PERIOD as f64 / 1e9 / (PKT as f64 * 8.0);
            let n = self.carry as u32;
            self.carry -= f64::from(n);
            let mut out = 0;
            let frame = [0u8; PKT];
            for i in 0..n {
                let t = now + u64::from(i) * PERIOD / u64::from(n.max(1));
                let ok = match &mut self.sender {
                    None => true,
                    Some(s) => match s.offer(self.port, 99, 0, &frame, t) {
                        Offer::Send(_) => true,
                        Offer::Queued => false,
                        Offer::Dropped => false,
                    },
                };
                if ok {
                    out += 1;
                }
            }
            if let Some(s) = &mut self.sender {
                s.release(now + PERIOD, |_, _, _, _| out += 1);
            }
            out
        }
    }

    /// Runs `hosts` into `link` for `periods`; returns the accusations'
    /// hosts and the period each was first accused in.
    fn run(hosts: &mut [Host], link: &Link, periods: u64) -> Vec<(u32, u64)> {
        let mut rx = Receiver::new(PERIOD, 0);
        let mut audit = Auditor::new(AuditConfig::for_senders(&cfg()));
        let mut seen: Vec<(u32, u64)> = Vec::new();
        let cap_pkts = link.capacity_bps * PERIOD as f64 / 1e9 / (PKT as f64 * 8.0);
        let mut buf = Vec::new();
        for p in 0..periods {
            let now = p * PERIOD;
            let offered: Vec<u32> = hosts.iter_mut().map(|h| h.send(now)).collect();
            let total: u32 = offered.iter().sum();
            // A drop-tail bottleneck drops from every sender alike.
            let pass = (cap_pkts / f64::from(total.max(1))).min(1.0);
            for (h, &n) in hosts.iter_mut().zip(&offered) {
                let mut credit = 0.0;
                for _ in 0..n {
                    let seq = h.seq;
                    h.seq = h.seq.wrapping_add(1);
                    credit += pass;
                    if credit < 1.0 {
                        continue;
                    }
                    credit -= 1.0;
                    let t = now + PERIOD / 2;
                    if h.sender.is_some() {
                        let a = rx.on_packet(h.id, h.port, seq, None, t);
                        audit.on_data(h.id, PKT, a.lost, a.new_entity, t);
                    } else {
                        audit.on_data(h.id, PKT, 0, false, t);
                    }
                }
            }
            let end = now + PERIOD;
            let mut msgs: Vec<(u32, Vec<u8>)> = Vec::new();
            rx.feedback(end, &mut buf, |host, m| msgs.push((host, m.to_vec())));
            audit.end_period(end, rx.last_congested());
            audit.tick(end);
            for (host, m) in msgs {
                let reports = crate::wire::decode_feedback(&m).unwrap();
                for h in hosts.iter_mut().filter(|h| h.id == host) {
                    if let Some(s) = &mut h.sender {
                        s.on_feedback(99, reports.clone(), end);
                    }
                }
            }
            for a in audit.accusations() {
                if !seen.iter().any(|s| s.0 == a.host) {
                    seen.push((a.host, p));
                }
            }
        }
        seen
    }

    #[test]
    fn a_flooder_that_ignores_feedback_is_accused_and_honest_hosts_are_not() {
        let link = Link {
            capacity_bps: 100e6,
        };
        let mut hosts = [
            Host::new(1, true, 100e6),
            Host::new(2, true, 60e6),
            Host::new(3, false, 300e6),
        ];
        let seen = run(&mut hosts, &link, 400);
        eprintln!("accused: {seen:?}");
        assert_eq!(
            seen.iter().map(|s| s.0).collect::<Vec<_>>(),
            vec![3],
            "{seen:?}"
        );
        // Within a quarter second of simulated time (50 periods).
        assert!(seen[0].1 < 60, "accused only at period {}", seen[0].1);
    }

    #[test]
    fn honest_hosts_under_heavy_load_are_never_accused() {
        let link = Link {
            capacity_bps: 100e6,
        };
        // Every host wants more than the link: a long congestion episode,
        // each controller backing off and probing again.
        let mut hosts = [
            Host::new(1, true, 400e6),
            Host::new(2, true, 250e6),
            Host::new(3, true, 90e6),
            Host::new(4, true, 1e9),
        ];
        let seen = run(&mut hosts, &link, 4000);
        assert!(seen.is_empty(), "honest hosts accused: {seen:?}");
        // The same load with the last host's controller gone: it is found.
        let mut hosts = [
            Host::new(1, true, 400e6),
            Host::new(2, true, 250e6),
            Host::new(3, true, 90e6),
            Host::new(4, false, 1e9),
        ];
        let seen = run(&mut hosts, &link, 400);
        assert_eq!(
            seen.iter().map(|s| s.0).collect::<Vec<_>>(),
            vec![4],
            "{seen:?}"
        );
    }

    #[test]
    fn a_small_sender_is_not_judged_and_a_reformed_one_is_forgiven() {
        let link = Link { capacity_bps: 20e6 };
        // Under the floor: nobody is accused even though host 2 ignores feedback.
        let mut hosts = [Host::new(1, true, 100e6), Host::new(2, false, 8e6)];
        assert!(run(&mut hosts, &link, 300).is_empty());

        let mut a = Auditor::new(AuditConfig::for_senders(&cfg()));
        let mut now = 0;
        a.end_period(now, false);
        for _ in 0..100 {
            for _ in 0..100 {
                a.on_data(7, PKT, 0, false, now);
            }
            now += PERIOD;
            a.end_period(now, true);
        }
        assert!(a.is_accused(7));
        let acc = a.accusations()[0];
        assert!(acc.rate_bps > acc.allowance_bps, "{acc:?}");
        // It stops: nothing congested, nothing over the allowance.
        let stopped = now;
        while now < stopped + a.config().forgive_ns - PERIOD {
            now += PERIOD;
            a.end_period(now, false);
            assert_eq!(a.tick(now), 0);
        }
        assert!(a.is_accused(7), "forgiven too early");
        now += 2 * PERIOD;
        a.end_period(now, false);
        assert_eq!(a.tick(now), 1);
        assert!(!a.is_accused(7));
    }

    #[test]
    fn cycling_entities_does_not_reset_the_episode_forever() {
        let mut a = Auditor::new(AuditConfig::for_senders(&cfg()));
        let mut now = 0;
        a.end_period(now, false);
        let mut first = None;
        for p in 0..400 {
            for i in 0..100 {
                // A new port every packet: a new entity every period.
                a.on_data(9, PKT, 0, i == 0, now);
            }
            now += PERIOD;
            a.end_period(now, true);
            if a.is_accused(9) && first.is_none() {
                first = Some(p);
            }
        }
        assert!(first.is_some(), "never accused");
    }
}
