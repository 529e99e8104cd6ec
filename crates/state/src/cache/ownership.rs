//! Ownership leases on flow hash ranges, and how a split assigns the ranges.

/// A lease on flow hash ranges: while `now < valid_until_ns`, this instance is the
/// only one the data plane sends the ranges' flows to, and it may cache their
/// records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ownership {
    /// The split epoch the lease belongs to (bumped by the control plane on every
    /// change of the hash-range split).
    pub epoch: u64,
    /// Owned ranges of the direction-invariant flow hash, inclusive on both ends.
    pub ranges: Vec<(u32, u32)>,
    /// The lease ends by itself at this time (the chain's clock: packet
    /// timestamps and `tick` times), so an instance cut off from the control plane
    /// stops caching without being told.
    pub valid_until_ns: u64,
}

impl Ownership {
    /// A lease on every hash.
    pub fn all(epoch: u64, valid_until_ns: u64) -> Ownership {
        Ownership {
            epoch,
            ranges: vec![(0, u32::MAX)],
            valid_until_ns,
        }
    }

    /// True if `flow_hash` falls in one of the ranges (ignoring validity).
    pub fn covers(&self, flow_hash: u32) -> bool {
        self.ranges
            .iter()
            .any(|&(lo, hi)| lo <= flow_hash && flow_hash <= hi)
    }

    /// True if the lease is valid at `now_ns`.
    pub fn valid_at(&self, now_ns: u64) -> bool {
        now_ns < self.valid_until_ns
    }
}

/// The inclusive hash range of each target of a weighted split, computed exactly
/// as the switch's hash-range groups do (`sluice_switch::fib::Group`: target `i`
/// gets hashes from the previous boundary up to `(sum of weights 0..=i << 32) /
/// total`, exclusive). `None` for a target of weight zero or if every weight is zero.
pub fn hash_range_split(weights: &[u32]) -> Vec<Option<(u32, u32)>> {
    let total: u64 = weights.iter().map(|&w| w as u64).sum();
    let mut out = Vec::with_capacity(weights.len());
    let mut acc = 0u64;
    let mut lo = 0u64;
    for &w in weights {
        if w == 0 || total == 0 {
            out.push(None);
            continue;
        }
        acc += w as u64;
        let hi = (acc << 32) / total; // exclusive
        out.push((hi > lo).then(|| (lo as u32, (hi - 1) as u32)));
        lo = hi;
    }
    out
}
