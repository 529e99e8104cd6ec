//! Turning the agents' cumulative chain counters into the scaler's metric, sans-IO.
//!
//! Each agent reports, per chain id it saw traffic enter at its VMs, cumulative
//! packets, bytes, SYNs and timed handshakes ([`ChainMeasure`]). A chain's
//! scaler configured with an agent metric (`metric: handshake_ms | connections
//! | mbps`) gets one sample per interval: the differences since the previous
//! sample, summed over hosts and over the chain's two directions. A counter that
//! went down is an agent that restarted: its current value is the difference.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sluice_proto::ChainMeasure;

/// Which agent-measured metric a scaler follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentMetric {
    /// Mean TCP handshake time through the chain, ms (lower is better).
    HandshakeMs,
    /// Handshakes completed per second (higher is better).
    Connections,
    /// Mbit/s entering the chain, both directions (higher is better).
    Mbps,
}

impl AgentMetric {
    /// Parses a `metric` setting: None for `reported` (the application's own).
    pub fn parse(s: &str) -> Result<Option<AgentMetric>, String> {
        match s {
            "reported" => Ok(None),
            "handshake_ms" => Ok(Some(AgentMetric::HandshakeMs)),
            "connections" => Ok(Some(AgentMetric::Connections)),
            "mbps" => Ok(Some(AgentMetric::Mbps)),
            _ => Err(format!(
                "metric: `{s}` is not reported, handshake_ms, connections or mbps"
            )),
        }
    }

    /// Whether larger values are better.
    pub fn higher_is_better(self) -> bool {
        !matches!(self, AgentMetric::HandshakeMs)
    }
}

/// The sums a sample is made of.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Bytes entering the chain.
    pub bytes: u64,
    /// SYNs entering it.
    pub syns: u64,
    /// Handshakes completed.
    pub handshakes: u64,
    /// Their summed time, ns.
    pub handshake_ns: u64,
}

impl Totals {
    fn add(&mut self, c: &ChainMeasure) {
        self.bytes += c.bytes;
        self.syns += c.syns;
        self.handshakes += c.handshakes;
        self.handshake_ns += c.handshake_ns;
    }

    /// `self - prev` field by field; a field that went down restarted from 0.
    fn since(&self, prev: &Totals) -> Totals {
        let d = |a: u64, b: u64| if a >= b { a - b } else { a };
        Totals {
            bytes: d(self.bytes, prev.bytes),
            syns: d(self.syns, prev.syns),
            handshakes: d(self.handshakes, prev.handshakes),
            handshake_ns: d(self.handshake_ns, prev.handshake_ns),
        }
    }

    fn plus(&self, o: &Totals) -> Totals {
        Totals {
            bytes: self.bytes + o.bytes,
            syns: self.syns + o.syns,
            handshakes: self.handshakes + o.handshakes,
            handshake_ns: self.handshake_ns + o.handshake_ns,
        }
    }
}

/// One chain's totals on one host: both directions of tenant `vni`'s chain
/// number `index` (ids `2 * index` and `2 * index + 1`).
pub fn chain_totals(reports: &[ChainMeasure], vni: u32, index: usize) -> Totals {
    let mut t = Totals::default();
    for c in reports {
        if c.vni == vni && usize::from(c.chain / 2) == index {
            t.add(c);
        }
    }
    t
}

/// What the agents measured of a chain over one interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// The interval's length, ms.
    pub interval_ms: u64,
    /// Its differences.
    pub delta: Totals,
}

impl Measured {
    /// The metric's value, or None if the interval says nothing about it (no
    /// connection opened, for the handshake time). Handshakes opened but none
    /// completed count as waiting the whole interval.
    pub fn value(&self, m: AgentMetric) -> Option<f64> {
        let secs = self.interval_ms.max(1) as f64 / 1000.0;
        let d = &self.delta;
        match m {
            AgentMetric::HandshakeMs if d.handshakes > 0 => {
                Some(d.handshake_ns as f64 / d.handshakes as f64 / 1e6)
            }
            AgentMetric::HandshakeMs if d.syns > 0 => Some(self.interval_ms as f64),
            AgentMetric::HandshakeMs => None,
            AgentMetric::Connections => Some(d.handshakes as f64 / secs),
            AgentMetric::Mbps => Some(d.bytes as f64 * 8.0 / secs / 1e6),
        }
    }
}

/// Samples one chain: remembers each host's totals at the last sample.
#[derive(Debug, Clone, Default)]
pub struct ChainSampler {
    prev: BTreeMap<u32, Totals>,
    started: bool,
}

impl ChainSampler {
    /// The interval's differences from per-host totals `now` (hosts missing
    /// from `now` keep their previous totals); None on the first call, which
    /// only records where counting starts.
    pub fn sample(&mut self, now: &BTreeMap<u32, Totals>, interval_ms: u64) -> Option<Measured> {
        let mut delta = Totals::default();
        for (h, t) in now {
            let prev = self.prev.get(h).copied().unwrap_or_default();
            if self.started {
                delta = delta.plus(&t.since(&prev));
            }
            self.prev.insert(*h, *t);
        }
        let first = !self.started;
        self.started = true;
        (!first).then_some(Measured { interval_ms, delta })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(vni: u32, chain: u16, bytes: u64, syns: u64, hs: u64, hs_ns: u64) -> ChainMeasure {
        ChainMeasure {
            vni,
            chain,
            bytes,
            syns,
            handshakes: hs,
            handshake_ns: hs_ns,
            ..ChainMeasure::default()
        }
    }

    #[test]
    fn a_chain_sums_both_directions_and_only_its_own() {
        let r = vec![
            cm(5, 2, 100, 3, 2, 10),
            cm(5, 3, 1000, 0, 0, 0),
            cm(5, 0, 7, 7, 7, 7),
            cm(6, 2, 9, 9, 9, 9),
        ];
        let t = chain_totals(&r, 5, 1);
        assert_eq!(
            t,
            Totals {
                bytes: 1100,
                syns: 3,
                handshakes: 2,
                handshake_ns: 10
            }
        );
    }

    #[test]
    fn samples_are_differences_over_hosts_and_survive_agent_restarts() {
        let mut s = ChainSampler::default();
        let t = |bytes, syns, hs, ns| Totals {
            bytes,
            syns,
            handshakes: hs,
            handshake_ns: ns,
        };
        let mut now = BTreeMap::from([(1, t(1000, 10, 10, 20_000_000)), (2, t(0, 0, 0, 0))]);
        assert_eq!(
            s.sample(&now, 1000),
            None,
            "the first call only starts counting"
        );
        now.insert(1, t(126_000, 30, 28, 20_000_000 + 18 * 4_000_000));
        now.insert(2, t(125_000, 2, 2, 2 * 13_000_000));
        let m = s.sample(&now, 1000).unwrap();
        assert_eq!(m.delta.handshakes, 20);
        assert_eq!(m.value(AgentMetric::Connections), Some(20.0));
        assert_eq!(m.value(AgentMetric::Mbps), Some(2.0));
        let hs = m.value(AgentMetric::HandshakeMs).unwrap();
        assert!((hs - 4.9).abs() < 1e-9, "{hs}");
        // Host 2's agent restarted: its counters start again from 0.
        now.insert(2, t(500, 1, 1, 1_000_000));
        let m = s.sample(&now, 500).unwrap();
        assert_eq!(m.delta, t(500, 1, 1, 1_000_000));
        assert_eq!(m.value(AgentMetric::Connections), Some(2.0));
        // SYNs but no handshake: waited at least the whole interval.
        now.insert(2, t(600, 5, 1, 1_000_000));
        let m = s.sample(&now, 800).unwrap();
        assert_eq!(m.value(AgentMetric::HandshakeMs), Some(800.0));
        // Nothing at all: no handshake time to report.
        let m = s.sample(&now, 800).unwrap();
        assert_eq!(m.value(AgentMetric::HandshakeMs), None);
        assert_eq!(m.value(AgentMetric::Connections), Some(0.0));
    }

    #[test]
    fn metric_names_parse() {
        assert_eq!(AgentMetric::parse("reported"), Ok(None));
        assert_eq!(
            AgentMetric::parse("handshake_ms"),
            Ok(Some(AgentMetric::HandshakeMs))
        );
        assert!(!AgentMetric::HandshakeMs.higher_is_better());
        assert!(AgentMetric::Mbps.higher_is_better());
        let e = AgentMetric::parse("rps").unwrap_err();
        assert!(e.contains("`rps`") && e.contains("handshake_ms"), "{e}");
    }
}
