//! Per-chain packet and drop rates over time, for the dashboard
//! (`GET /v1/traffic`), sans-IO.
//!
//! The agents' heartbeats already carry cumulative counters: per chain id,
//! the packets that entered it from a VM on that host
//! ([`sluice_proto::ChainMeasure`]); per NF instance, the packets it received,
//! sent and dropped ([`sluice_proto::InstanceHealth`]). The controller keeps the
//! latest of each, and every [`SAMPLE_EVERY`] the [`Traffic`] sampler turns the
//! differences since the previous sample into rates: packets per second
//! entering each chain (both directions, summed over hosts), and received,
//! sent and dropped packets per second at each instance. A chain's drop rate
//! is the sum of the drop rates of its middleboxes' instances (a middlebox
//! shared by several chains counts in each). The last [`KEPT`] samples of each
//! chain are kept: five minutes of history, whoever watches, so a browser that
//! opens the dashboard sees the recent past at once. A counter that went down
//! restarted (an agent or instance process started again): its current value
//! is the difference.
//!
//! The agent at a chain's end also reports what the chain added to each packet
//! it delivered (`ChainMeasure::latency`, the chain clock); a sample merges the
//! hosts' histograms of the interval and keeps the median and 99th percentile
//! of it, estimated as Prometheus's `histogram_quantile` does.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use sluice_proto::{LatencyHistogram, LATENCY_BOUNDS_NS};

/// How often the reconciler samples, ms.
pub const SAMPLE_EVERY_MS: u64 = 1000;
/// [`SAMPLE_EVERY_MS`] as a duration.
pub const SAMPLE_EVERY: std::time::Duration = std::time::Duration::from_millis(SAMPLE_EVERY_MS);
/// Samples kept per chain (five minutes at one a second).
pub const KEPT: usize = 300;

/// `(tenant, chain name)`.
pub type ChainKey = (String, String);

/// An instance's cumulative counters, as its agent last reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InstanceCounts {
    /// Packets received.
    pub rx: u64,
    /// Packets sent on.
    pub tx: u64,
    /// Packets dropped: by a verdict, as malformed, or on a full queue.
    pub drops: u64,
}

/// One chain at one sample.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// When, Unix milliseconds.
    pub at_ms: u64,
    /// Packets per second entering the chain (both directions, every host).
    pub packets_per_s: f64,
    /// Packets per second dropped by its middleboxes' instances.
    pub drops_per_s: f64,
    /// Median time the chain added to the packets it delivered in the
    /// interval (both directions, every host), seconds; none without packets.
    #[serde(default)]
    pub latency_p50_s: Option<f64>,
    /// Their 99th percentile, seconds.
    #[serde(default)]
    pub latency_p99_s: Option<f64>,
}

/// An instance's rates at the latest sample.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Rates {
    /// Packets received per second.
    pub rx_per_s: f64,
    /// Packets sent per second.
    pub tx_per_s: f64,
    /// Packets dropped per second.
    pub drops_per_s: f64,
}

impl Rates {
    /// `self + o`, field by field.
    pub fn plus(&self, o: &Rates) -> Rates {
        Rates {
            rx_per_s: self.rx_per_s + o.rx_per_s,
            tx_per_s: self.tx_per_s + o.tx_per_s,
            drops_per_s: self.drops_per_s + o.drops_per_s,
        }
    }
}

/// What a sample is taken from: the latest cumulative counters.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// Packets that entered each chain at each host: `(host, chain) -> packets`.
    pub chains: BTreeMap<(u32, ChainKey), u64>,
    /// Every instance's counters, by instance name (`tenant/middlebox/k`).
    pub instances: BTreeMap<String, InstanceCounts>,
    /// The instances of each chain's middleboxes, by chain (every chain of
    /// every tenant, traffic or not).
    pub members: BTreeMap<ChainKey, Vec<String>>,
    /// What each chain added to the packets delivered at its end at each
    /// host, both directions: `(host, chain) -> histogram`.
    pub latency: BTreeMap<(u32, ChainKey), LatencyHistogram>,
}

/// The sampler and its history.
#[derive(Debug, Clone, Default)]
pub struct Traffic {
    last_ms: Option<u64>,
    prev_chains: BTreeMap<(u32, ChainKey), u64>,
    prev_instances: BTreeMap<String, InstanceCounts>,
    prev_latency: BTreeMap<(u32, ChainKey), LatencyHistogram>,
    rates: BTreeMap<String, Rates>,
    history: BTreeMap<ChainKey, VecDeque<Sample>>,
}

/// `now - prev`, or `now` if the counter went down (it restarted).
fn since(now: u64, prev: u64) -> u64 {
    if now >= prev {
        now - prev
    } else {
        now
    }
}

/// The observations of `now` not in `prev`; all of `now` if a bucket went
/// down (the agent restarted).
fn histogram_since(now: &LatencyHistogram, prev: Option<&LatencyHistogram>) -> LatencyHistogram {
    let Some(p) = prev else {
        return *now;
    };
    if now.counts.iter().zip(&p.counts).any(|(n, p)| n < p) {
        return *now;
    }
    let mut d = *now;
    for (c, p) in d.counts.iter_mut().zip(&p.counts) {
        *c -= p;
    }
    d.sum_ns = now.sum_ns.wrapping_sub(p.sum_ns);
    d
}

/// The `q` quantile of `h` in seconds, interpolated linearly inside its
/// bucket as Prometheus's `histogram_quantile` does (the lowest bucket from
/// zero; one in the `+Inf` bucket is the highest finite bound); none if `h`
/// is empty.
pub fn quantile(h: &LatencyHistogram, q: f64) -> Option<f64> {
    let total = h.count();
    if total == 0 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * total as f64;
    let mut below = 0u64;
    for (i, &c) in h.counts.iter().enumerate() {
        if c > 0 && (below + c) as f64 >= rank {
            let Some(&upper) = LATENCY_BOUNDS_NS.get(i) else {
                return LATENCY_BOUNDS_NS.last().map(|b| *b as f64 / 1e9);
            };
            let lower = if i == 0 { 0 } else { LATENCY_BOUNDS_NS[i - 1] };
            let within = ((rank - below as f64) / c as f64).clamp(0.0, 1.0);
            return Some((lower as f64 + (upper - lower) as f64 * within) / 1e9);
        }
        below += c;
    }
    LATENCY_BOUNDS_NS.last().map(|b| *b as f64 / 1e9)
}

impl Traffic {
    /// Whether a sample is due at `now_ms`.
    pub fn due(&self, now_ms: u64) -> bool {
        self.last_ms
            .is_none_or(|l| now_ms.saturating_sub(l) >= SAMPLE_EVERY_MS)
    }

    /// Takes a sample at `now_ms` from `o`. The first call only records where
    /// counting starts; a counter first seen now counts from zero at the
    /// previous sample unless it is the first sample.
    pub fn sample(&mut self, now_ms: u64, o: &Observed) {
        let Some(last) = self.last_ms.replace(now_ms) else {
            self.prev_chains = o.chains.clone();
            self.prev_instances = o.instances.clone();
            self.prev_latency = o.latency.clone();
            return;
        };
        let secs = now_ms.saturating_sub(last).max(1) as f64 / 1000.0;
        let mut packets: BTreeMap<&ChainKey, u64> = BTreeMap::new();
        for (k @ (_, chain), n) in &o.chains {
            let prev = self.prev_chains.get(k).copied().unwrap_or(0);
            *packets.entry(chain).or_default() += since(*n, prev);
        }
        let mut added: BTreeMap<&ChainKey, LatencyHistogram> = BTreeMap::new();
        for (k @ (_, chain), h) in &o.latency {
            let d = histogram_since(h, self.prev_latency.get(k));
            added.entry(chain).or_default().add(&d);
        }
        self.rates.clear();
        for (name, c) in &o.instances {
            let p = self.prev_instances.get(name).copied().unwrap_or_default();
            self.rates.insert(
                name.clone(),
                Rates {
                    rx_per_s: since(c.rx, p.rx) as f64 / secs,
                    tx_per_s: since(c.tx, p.tx) as f64 / secs,
                    drops_per_s: since(c.drops, p.drops) as f64 / secs,
                },
            );
        }
        self.history.retain(|k, _| o.members.contains_key(k));
        for (chain, members) in &o.members {
            let drops: f64 = members
                .iter()
                .filter_map(|m| self.rates.get(m))
                .map(|r| r.drops_per_s)
                .sum();
            let lat = added.get(chain);
            let h = self.history.entry(chain.clone()).or_default();
            h.push_back(Sample {
                at_ms: now_ms,
                packets_per_s: packets.get(chain).copied().unwrap_or(0) as f64 / secs,
                drops_per_s: drops,
                latency_p50_s: lat.and_then(|l| quantile(l, 0.5)),
                latency_p99_s: lat.and_then(|l| quantile(l, 0.99)),
            });
            while h.len() > KEPT {
                h.pop_front();
            }
        }
        self.prev_chains = o.chains.clone();
        self.prev_instances = o.instances.clone();
        self.prev_latency = o.latency.clone();
    }

    /// An instance's rates at the latest sample (zero if unknown).
    pub fn rates(&self, instance: &str) -> Rates {
        self.rates.get(instance).copied().unwrap_or_default()
    }

    /// A chain's samples, oldest first.
    pub fn history(&self, chain: &ChainKey) -> Vec<Sample> {
        self.history_since(chain, None)
    }

    /// A chain's samples taken after `since_ms` (all with `None`), oldest
    /// first.
    pub fn history_since(&self, chain: &ChainKey, since_ms: Option<u64>) -> Vec<Sample> {
        self.history
            .get(chain)
            .map(|h| {
                h.iter()
                    .filter(|s| since_ms.is_none_or(|t| s.at_ms > t))
                    .copied()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The latest sample of a chain.
    pub fn latest(&self, chain: &ChainKey) -> Option<Sample> {
        self.history.get(chain).and_then(|h| h.back().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(c: &str) -> ChainKey {
        ("acme".to_string(), c.to_string())
    }

    fn observed(ab: &[(u32, u64)], fw: (u64, u64, u64)) -> Observed {
        let mut o = Observed::default();
        for (h, n) in ab {
            o.chains.insert((*h, key("ab")), *n);
        }
        o.instances.insert(
            "acme/fw/0".into(),
            InstanceCounts {
                rx: fw.0,
                tx: fw.1,
                drops: fw.2,
            },
        );
        o.members.insert(key("ab"), vec!["acme/fw/0".into()]);
        o.members.insert(key("idle"), vec![]);
        o
    }

    /// A histogram with `n` observations of `ns` each.
    fn hist(obs: &[(u64, u64)]) -> LatencyHistogram {
        let mut h = LatencyHistogram::default();
        for &(ns, n) in obs {
            h.observe(ns, n);
        }
        h
    }

    #[test]
    fn quantiles_interpolate_inside_buckets_as_prometheus_does() {
        assert_eq!(quantile(&LatencyHistogram::default(), 0.5), None);
        // 100 observations in (50, 100] µs: the median halfway through it.
        let h = hist(&[(80_000, 100)]);
        let close = |a: Option<f64>, b: f64| (a.unwrap() - b).abs() < 1e-12;
        assert!(close(quantile(&h, 0.5), 75e-6), "{:?}", quantile(&h, 0.5));
        assert!(close(quantile(&h, 0.99), 99.5e-6));
        // 99 fast, 1 slow: the p99 is the fast bucket's top, above it the slow.
        let h = hist(&[(5_000, 99), (2_000_000, 1)]);
        assert!(close(quantile(&h, 0.99), 10e-6));
        assert!(close(quantile(&h, 1.0), 2.5e-3));
        // Beyond the last bound: the last bound.
        let h = hist(&[(u64::MAX / 2, 3)]);
        assert_eq!(quantile(&h, 0.5), Some(1.0));
    }

    #[test]
    fn chain_latency_is_merged_over_hosts_per_interval_and_survives_restarts() {
        let mut t = Traffic::default();
        let with = |h1: LatencyHistogram, h2: LatencyHistogram| {
            let mut o = observed(&[(1, 0), (2, 0)], (0, 0, 0));
            o.latency.insert((1, key("ab")), h1);
            o.latency.insert((2, key("ab")), h2);
            o
        };
        // Before counting starts: 1,000 slow packets, not in any interval.
        t.sample(1_000, &with(hist(&[(900_000, 1000)]), hist(&[])));
        // Then host 1 delivers 50 at ~20 µs and host 2 50 at ~200 µs.
        t.sample(
            2_000,
            &with(
                hist(&[(900_000, 1000), (20_000, 50)]),
                hist(&[(200_000, 50)]),
            ),
        );
        let s = t.latest(&key("ab")).unwrap();
        let (p50, p99) = (s.latency_p50_s.unwrap(), s.latency_p99_s.unwrap());
        assert!((10e-6..=25e-6).contains(&p50), "{p50}");
        assert!((100e-6..=250e-6).contains(&p99), "{p99}");
        // Host 2's agent restarted (its counts went down): what it has now
        // is the interval's; host 1 delivered nothing more.
        t.sample(
            3_000,
            &with(
                hist(&[(900_000, 1000), (20_000, 50)]),
                hist(&[(3_000_000, 10)]),
            ),
        );
        let s = t.latest(&key("ab")).unwrap();
        let p50 = s.latency_p50_s.unwrap();
        assert!((2.5e-3..=5e-3).contains(&p50), "{p50}");
        // Nothing delivered: no latency.
        t.sample(
            4_000,
            &with(
                hist(&[(900_000, 1000), (20_000, 50)]),
                hist(&[(3_000_000, 10)]),
            ),
        );
        assert_eq!(t.latest(&key("ab")).unwrap().latency_p99_s, None);
    }

    #[test]
    fn rates_are_differences_over_the_interval_summed_over_hosts() {
        let mut t = Traffic::default();
        assert!(t.due(5_000));
        t.sample(5_000, &observed(&[(1, 100), (2, 50)], (10, 10, 0)));
        assert!(
            t.history(&key("ab")).is_empty(),
            "the first call only starts"
        );
        assert!(!t.due(5_999));
        assert!(t.due(6_000));
        t.sample(7_000, &observed(&[(1, 1100), (2, 1050)], (2010, 1810, 200)));
        let h = t.history(&key("ab"));
        assert_eq!(
            h,
            [Sample {
                at_ms: 7_000,
                packets_per_s: 1000.0,
                drops_per_s: 100.0,
                latency_p50_s: None,
                latency_p99_s: None,
            }]
        );
        assert_eq!(
            t.rates("acme/fw/0"),
            Rates {
                rx_per_s: 1000.0,
                tx_per_s: 900.0,
                drops_per_s: 100.0
            }
        );
        // A chain without traffic still has its (zero) samples.
        assert_eq!(t.history(&key("idle"))[0].packets_per_s, 0.0);
        assert_eq!(t.rates("acme/nothing/0"), Rates::default());
        // A poller that has the first sample gets only the later ones.
        t.sample(8_000, &observed(&[(1, 1100), (2, 1050)], (2010, 1810, 200)));
        let later = t.history_since(&key("ab"), Some(7_000));
        assert_eq!(later.len(), 1);
        assert_eq!(later[0].at_ms, 8_000);
        assert_eq!(t.latest(&key("ab")), Some(later[0]));
        assert_eq!(later[0].packets_per_s, 0.0);
    }

    #[test]
    fn a_counter_that_went_down_restarted_and_counts_from_zero() {
        let mut t = Traffic::default();
        t.sample(0, &observed(&[(1, 5000), (2, 5000)], (900, 900, 90)));
        // Host 2's agent and the instance started again.
        t.sample(1_000, &observed(&[(1, 5100), (2, 40)], (30, 20, 10)));
        let s = t.history(&key("ab"))[0];
        assert_eq!((s.packets_per_s, s.drops_per_s), (140.0, 10.0));
        assert_eq!(t.rates("acme/fw/0").rx_per_s, 30.0);
    }

    #[test]
    fn history_is_bounded_and_forgets_deleted_chains() {
        let mut t = Traffic::default();
        for i in 0..(KEPT as u64 + 20) {
            t.sample(i * 1000, &observed(&[(1, i * 10)], (0, 0, 0)));
        }
        let h = t.history(&key("ab"));
        assert_eq!(h.len(), KEPT);
        assert_eq!(h.last().unwrap().at_ms, (KEPT as u64 + 19) * 1000);
        assert!(h.iter().all(|s| s.packets_per_s == 10.0), "{h:?}");
        let mut o = observed(&[(1, 0)], (0, 0, 0));
        o.members.remove(&key("ab"));
        t.sample(10_000_000, &o);
        assert!(t.history(&key("ab")).is_empty());
        assert_eq!(t.history(&key("idle")).len(), KEPT);
    }
}
