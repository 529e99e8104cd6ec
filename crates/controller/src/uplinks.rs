//! What each rack's uplink carried, measured (sans-IO): the agents' per-peer
//! fabric counters ([`sluice_proto::PeerTraffic`], cumulative, in their
//! heartbeats) added up over host pairs in different racks.
//!
//! Network-aware distribution predicts each uplink's load from the chains'
//! entering traffic and the shares it installs
//! ([`crate::reconcile::TenantDistribution::uplink`]); this is what to hold
//! the prediction against without access to the network's own counters. A
//! datagram from a host in rack A to a host in rack B crosses A's uplink out
//! and B's in (one spine between racks, as Stratos's datacenters and the
//! testbed's racks have); it counts at its wire size, the UDP payload the
//! agent sent plus [`FABRIC_WIRE_OVERHEAD`], so the totals compare with a
//! link's own byte counters. What the fabric does not carry (a host's
//! control traffic, ARP) is not in them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sluice_proto::FABRIC_WIRE_OVERHEAD;

/// Cumulative `(packets, bytes)` one host sent to one peer.
pub type PairCount = (u64, u64);

/// One rack uplink, measured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Uplink {
    /// Bytes per second out of the rack over the last interval.
    pub out_per_s: f64,
    /// Bytes per second into the rack.
    pub in_per_s: f64,
    /// Bytes out of the rack since the controller started measuring.
    pub out_total: u64,
    /// Bytes into the rack since then.
    pub in_total: u64,
}

/// The meter: the previous counters and every rack's uplink.
#[derive(Debug, Clone, Default)]
pub struct UplinkMeter {
    last_ms: Option<u64>,
    prev: BTreeMap<(u32, u32), PairCount>,
    racks: BTreeMap<String, Uplink>,
}

/// `now - prev`, or `now` if the counter went down (its agent restarted).
fn since(now: u64, prev: u64) -> u64 {
    now.checked_sub(prev).unwrap_or(now)
}

impl UplinkMeter {
    /// Takes a sample at `now_ms`: `counters` maps `(host, peer)` to what the
    /// host reported sending the peer, `racks` maps every registered host to
    /// its rack. The first sample only records where counting starts; a pair
    /// first seen later counts from zero. With fewer than two racks there are
    /// no uplinks, and nothing is kept.
    pub fn sample(
        &mut self,
        now_ms: u64,
        counters: &BTreeMap<(u32, u32), PairCount>,
        racks: &BTreeMap<u32, String>,
    ) {
        let distinct: std::collections::BTreeSet<&str> =
            racks.values().map(String::as_str).collect();
        if distinct.len() < 2 {
            self.racks.clear();
            self.prev = counters.clone();
            self.last_ms = Some(now_ms);
            return;
        }
        for r in &distinct {
            self.racks.entry((*r).to_string()).or_default();
        }
        self.racks.retain(|r, _| distinct.contains(r.as_str()));
        let Some(last) = self.last_ms.replace(now_ms) else {
            self.prev = counters.clone();
            return;
        };
        let secs = now_ms.saturating_sub(last).max(1) as f64 / 1000.0;
        let mut out: BTreeMap<&str, u64> = BTreeMap::new();
        let mut into: BTreeMap<&str, u64> = BTreeMap::new();
        for (pair @ (src, dst), (packets, bytes)) in counters {
            let (Some(a), Some(b)) = (racks.get(src), racks.get(dst)) else {
                continue;
            };
            if a == b {
                continue;
            }
            let (pp, pb) = self.prev.get(pair).copied().unwrap_or_default();
            // A restart resets both counters together: judge by packets.
            let (dp, db) = if *packets < pp {
                (*packets, *bytes)
            } else {
                (packets - pp, since(*bytes, pb))
            };
            let wire = db + dp * FABRIC_WIRE_OVERHEAD;
            *out.entry(a.as_str()).or_default() += wire;
            *into.entry(b.as_str()).or_default() += wire;
        }
        for (rack, u) in self.racks.iter_mut() {
            let o = out.get(rack.as_str()).copied().unwrap_or(0);
            let i = into.get(rack.as_str()).copied().unwrap_or(0);
            u.out_per_s = o as f64 / secs;
            u.in_per_s = i as f64 / secs;
            u.out_total += o;
            u.in_total += i;
        }
        self.prev = counters.clone();
    }

    /// Every rack's uplink at the latest sample, by rack (empty with fewer
    /// than two racks).
    pub fn uplinks(&self) -> &BTreeMap<String, Uplink> {
        &self.racks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn racks(of: &[(u32, &str)]) -> BTreeMap<u32, String> {
        of.iter().map(|(h, r)| (*h, r.to_string())).collect()
    }

    fn counts(of: &[((u32, u32), PairCount)]) -> BTreeMap<(u32, u32), PairCount> {
        of.iter().copied().collect()
    }

    /// Hosts 1-2 in r1, 3 in r2: only what crosses racks counts, at its wire
    /// size, out of the sender's rack and into the receiver's.
    #[test]
    fn what_crosses_racks_counts_on_both_uplinks_at_wire_size() {
        let rk = racks(&[(1, "r1"), (2, "r1"), (3, "r2")]);
        let mut m = UplinkMeter::default();
        m.sample(0, &counts(&[((1, 3), (10, 10_000))]), &rk);
        assert_eq!(
            m.uplinks()["r1"],
            Uplink::default(),
            "the first sample is a baseline"
        );
        m.sample(
            2_000,
            &counts(&[
                ((1, 3), (110, 110_000)), // 100 datagrams, 100 kB to r2
                ((1, 2), (500, 500_000)), // within r1: no uplink
                ((3, 2), (20, 2_000)),    // new pair: from zero
            ]),
            &rk,
        );
        let wire_up = 100_000 + 100 * FABRIC_WIRE_OVERHEAD;
        let wire_down = 2_000 + 20 * FABRIC_WIRE_OVERHEAD;
        let r1 = m.uplinks()["r1"];
        let r2 = m.uplinks()["r2"];
        assert_eq!((r1.out_total, r1.in_total), (wire_up, wire_down));
        assert_eq!((r2.out_total, r2.in_total), (wire_down, wire_up));
        assert!((r1.out_per_s - wire_up as f64 / 2.0).abs() < 1e-6);
        assert!((r2.out_per_s - wire_down as f64 / 2.0).abs() < 1e-6);
    }

    /// A restarted agent's counters start again: what they show is new
    /// traffic, and the totals never go back.
    #[test]
    fn a_restarted_agent_counts_from_zero_and_totals_only_grow() {
        let rk = racks(&[(1, "a"), (2, "b")]);
        let mut m = UplinkMeter::default();
        m.sample(0, &counts(&[((1, 2), (1_000, 1_000_000))]), &rk);
        m.sample(1_000, &counts(&[((1, 2), (1_100, 1_100_000))]), &rk);
        let first = m.uplinks()["a"].out_total;
        assert_eq!(first, 100_000 + 100 * FABRIC_WIRE_OVERHEAD);
        m.sample(2_000, &counts(&[((1, 2), (5, 5_000))]), &rk);
        let a = m.uplinks()["a"];
        assert_eq!(a.out_total, first + 5_000 + 5 * FABRIC_WIRE_OVERHEAD);
        assert!((a.out_per_s - (5_000 + 5 * FABRIC_WIRE_OVERHEAD) as f64).abs() < 1e-6);
        // Silence: rates fall to zero, totals stay.
        m.sample(3_000, &counts(&[((1, 2), (5, 5_000))]), &rk);
        assert_eq!(m.uplinks()["a"].out_per_s, 0.0);
        assert_eq!(m.uplinks()["b"].in_total, a.out_total);
    }

    /// One rack (or none declared) has no uplinks; a host that joins a
    /// second rack brings them, with zero rows for racks without traffic.
    #[test]
    fn uplinks_exist_only_with_two_racks() {
        let mut m = UplinkMeter::default();
        let one = racks(&[(1, "r1"), (2, "r1")]);
        m.sample(0, &counts(&[((1, 2), (1, 100))]), &one);
        m.sample(1_000, &counts(&[((1, 2), (9, 900))]), &one);
        assert!(m.uplinks().is_empty());
        let two = racks(&[(1, "r1"), (2, "r1"), (3, "r2")]);
        m.sample(2_000, &counts(&[((1, 2), (20, 2_000))]), &two);
        assert_eq!(m.uplinks().len(), 2);
        assert_eq!(m.uplinks()["r2"], Uplink::default());
        // Pairs whose hosts are unknown (deregistered) are ignored.
        m.sample(3_000, &counts(&[((1, 9), (50, 5_000))]), &two);
        assert_eq!(m.uplinks()["r1"].out_total, 0);
    }
}
