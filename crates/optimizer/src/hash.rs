//! Mapping CoMb's fractions `d_{c,n}` to per-node traffic filters (§6.1).
//!
//! Each node on a class's path gets a contiguous range of a direction-invariant 5-tuple
//! hash, so both directions of a session land on the same node and the ranges partition
//! the hash space exactly (no session is processed twice or not at all).

/// An IPv4 5-tuple.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FiveTuple {
    /// Source address.
    pub src_ip: u32,
    /// Destination address.
    pub dst_ip: u32,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// IP protocol number.
    pub proto: u8,
}

impl FiveTuple {
    /// The tuple of the reverse direction.
    pub fn reversed(self) -> Self {
        Self {
            src_ip: self.dst_ip,
            dst_ip: self.src_ip,
            src_port: self.dst_port,
            dst_port: self.src_port,
            proto: self.proto,
        }
    }
}

/// A 32-bit hash that is identical for both directions of a session.
pub fn symmetric_hash(t: &FiveTuple) -> u32 {
    // Ordering the two endpoints canonically is what makes the hash direction-invariant.
    let a = ((t.src_ip as u64) << 16) | t.src_port as u64;
    let b = ((t.dst_ip as u64) << 16) | t.dst_port as u64;
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    let mut h = mix(lo ^ 0x9E37_79B9_7F4A_7C15);
    h = mix(h ^ hi);
    h = mix(h ^ t.proto as u64);
    (h >> 32) as u32
}

fn mix(mut x: u64) -> u64 {
    // splitmix64 finaliser: cheap and well distributed.
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A half-open range `[start, end)` of the 32-bit hash space, with `end` up to `2^32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashRange {
    /// First hash value in the range.
    pub start: u64,
    /// One past the last hash value.
    pub end: u64,
}

impl HashRange {
    /// Whether `hash` falls inside the range.
    pub fn contains(&self, hash: u32) -> bool {
        (self.start..self.end).contains(&(hash as u64))
    }

    /// Fraction of the hash space covered.
    pub fn fraction(&self) -> f64 {
        (self.end - self.start) as f64 / HASH_SPACE as f64
    }
}

const HASH_SPACE: u64 = 1 << 32;

/// Errors from mapping fractions to filters.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FilterError {
    /// A fraction is negative or not finite.
    #[error("fraction {index} is {value}, must be finite and non-negative")]
    BadFraction {
        /// Position of the fraction.
        index: usize,
        /// Offending value.
        value: f64,
    },
    /// The fractions do not sum to 1.
    #[error("fractions sum to {0}, expected 1")]
    BadSum(f64),
    /// A prefix length above 32.
    #[error("prefix length {0} exceeds 32")]
    BadPrefix(u8),
}

/// Turns the fractions of one class (`d_{c,n}` over its nodes, in path order) into
/// contiguous hash ranges that partition the hash space exactly.
pub fn hash_ranges(fractions: &[f64]) -> Result<Vec<HashRange>, FilterError> {
    if let Some((index, &value)) = fractions
        .iter()
        .enumerate()
        .find(|(_, v)| !v.is_finite() || **v < 0.0)
    {
        return Err(FilterError::BadFraction { index, value });
    }
    let sum: f64 = fractions.iter().sum();
    if (sum - 1.0).abs() > 1e-6 {
        return Err(FilterError::BadSum(sum));
    }
    let mut out = Vec::with_capacity(fractions.len());
    let mut acc = 0.0;
    let mut start = 0u64;
    for (i, &f) in fractions.iter().enumerate() {
        acc += f;
        // Cumulative rounding keeps the total error below one hash value and the last
        // range always ends exactly at the top of the space.
        let end = if i + 1 == fractions.len() {
            HASH_SPACE
        } else {
            ((acc / sum) * HASH_SPACE as f64)
                .round()
                .clamp(start as f64, HASH_SPACE as f64) as u64
        };
        out.push(HashRange { start, end });
        start = end;
    }
    Ok(out)
}

/// Hash-range filters for one class from its LP fractions (`(node, d_{c,n})` in path
/// order, as in [`crate::comb::LoadAssignment::fractions`]). Nodes with a zero share get
/// no filter.
pub fn class_filters(fractions: &[(usize, f64)]) -> Result<Vec<(usize, HashRange)>, FilterError> {
    let d: Vec<f64> = fractions.iter().map(|f| f.1).collect();
    let ranges = hash_ranges(&d)?;
    Ok(fractions
        .iter()
        .zip(ranges)
        .filter(|(_, r)| r.end > r.start)
        .map(|(f, r)| (f.0, r))
        .collect())
}

/// An IPv4 prefix `addr/len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    /// Network address (host bits zero).
    pub addr: u32,
    /// Prefix length, 0..=32.
    pub len: u8,
}

impl Prefix {
    /// Whether `ip` is inside the prefix.
    pub fn contains(&self, ip: u32) -> bool {
        let len = self.len.min(32) as u32;
        len == 0 || (ip ^ self.addr) >> (32 - len) == 0
    }
}

/// Splits a source prefix into sub-prefixes approximating the fractions, for boxes with
/// TCAM-like classifiers (§6.1). Each fraction is rounded to a multiple of
/// `2^-extra_bits`; returns one list of prefixes per fraction, jointly covering `base`.
pub fn prefix_split(
    base: Prefix,
    fractions: &[f64],
    extra_bits: u8,
) -> Result<Vec<Vec<Prefix>>, FilterError> {
    if base.len > 32 {
        return Err(FilterError::BadPrefix(base.len));
    }
    let ranges = hash_ranges(fractions)?;
    let bits = extra_bits.min(32 - base.len);
    let units = 1u64 << bits;
    let mut out = Vec::with_capacity(ranges.len());
    for r in ranges {
        let lo = (r.start * units + HASH_SPACE / 2) / HASH_SPACE;
        let hi = (r.end * units + HASH_SPACE / 2) / HASH_SPACE;
        out.push(cover_units(base, bits, lo, hi));
    }
    Ok(out)
}

/// Minimal set of aligned prefixes covering sub-blocks `[lo, hi)` of `base` split into
/// `2^bits` equal blocks.
fn cover_units(base: Prefix, bits: u8, mut lo: u64, hi: u64) -> Vec<Prefix> {
    let mut out = Vec::new();
    while lo < hi {
        let mut size = if lo == 0 {
            1u64 << bits
        } else {
            1u64 << lo.trailing_zeros().min(bits as u32)
        };
        while lo + size > hi {
            size >>= 1;
        }
        let len = base.len + bits - size.trailing_zeros() as u8;
        let shift = 32 - (base.len + bits) as u32;
        let addr = if bits == 0 {
            base.addr
        } else {
            base.addr | ((lo as u32) << shift)
        };
        out.push(Prefix { addr, len });
        lo += size;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuple(i: u32) -> FiveTuple {
        FiveTuple {
            src_ip: 0x0A01_0000 | (i & 0xFFFF),
            dst_ip: 0x0A02_0000 | (i.wrapping_mul(7919) & 0xFFFF),
            src_port: (1024 + i % 50000) as u16,
            dst_port: 80,
            proto: 6,
        }
    }

    #[test]
    fn hash_is_direction_invariant_but_not_trivial() {
        let mut distinct = std::collections::HashSet::new();
        for i in 0..1000 {
            let t = tuple(i);
            assert_eq!(symmetric_hash(&t), symmetric_hash(&t.reversed()));
            distinct.insert(symmetric_hash(&t));
        }
        assert!(distinct.len() > 990);
    }

    #[test]
    fn ranges_partition_and_match_fractions() {
        let d = [0.5, 0.2, 0.0, 0.3];
        let r = hash_ranges(&d).unwrap();
        assert_eq!(r[0].start, 0);
        assert_eq!(r.last().unwrap().end, 1 << 32);
        for w in r.windows(2) {
            assert_eq!(w[0].end, w[1].start);
        }
        assert_eq!(r[2].start, r[2].end);
        // Every session is claimed by exactly one node, in empirical proportion to d.
        let mut counts = [0usize; 4];
        let n = 40_000;
        for i in 0..n {
            let h = symmetric_hash(&tuple(i));
            let owners: Vec<usize> = (0..4).filter(|&k| r[k].contains(h)).collect();
            assert_eq!(owners.len(), 1);
            counts[owners[0]] += 1;
        }
        for k in 0..4 {
            let share = counts[k] as f64 / n as f64;
            assert!((share - d[k]).abs() < 0.02, "node {k}: {share} vs {}", d[k]);
        }
    }

    #[test]
    fn lp_fractions_become_filters() {
        use crate::comb::{min_max_load, NetworkProblem, Strategy, TrafficClass};
        let p = NetworkProblem {
            prov: vec![vec![10.0], vec![10.0]],
            footprints: vec![vec![1.0]],
            classes: vec![TrafficClass {
                path: vec![0, 1],
                volume: 10.0,
                hyperapp: 0,
            }],
            node_footprints: Vec::new(),
        };
        let a = min_max_load(&p, Strategy::Path, true).unwrap();
        let f = class_filters(&a.fractions[0]).unwrap();
        assert_eq!(f.len(), 2);
        for (node, r) in &f {
            assert!((r.fraction() - 0.5).abs() < 1e-6, "node {node}: {r:?}");
        }
    }

    #[test]
    fn bad_fractions_are_rejected() {
        assert_eq!(
            hash_ranges(&[0.5, 0.4]).unwrap_err(),
            FilterError::BadSum(0.9)
        );
        assert!(matches!(
            hash_ranges(&[1.5, -0.5]),
            Err(FilterError::BadFraction { index: 1, .. })
        ));
    }

    #[test]
    fn prefix_split_matches_paper_example() {
        // 10.1.0.0/16 split in halves -> 10.1.0.0/17 and 10.1.128.0/17 (§6.1).
        let base = Prefix {
            addr: 0x0A01_0000,
            len: 16,
        };
        let p = prefix_split(base, &[0.5, 0.5], 4).unwrap();
        assert_eq!(
            p[0],
            vec![Prefix {
                addr: 0x0A01_0000,
                len: 17
            }]
        );
        assert_eq!(
            p[1],
            vec![Prefix {
                addr: 0x0A01_8000,
                len: 17
            }]
        );
        // 0.25 / 0.75: the second node gets a /18 and a /17.
        let p = prefix_split(base, &[0.25, 0.75], 4).unwrap();
        assert_eq!(
            p[0],
            vec![Prefix {
                addr: 0x0A01_0000,
                len: 18
            }]
        );
        assert_eq!(
            p[1],
            vec![
                Prefix {
                    addr: 0x0A01_4000,
                    len: 18
                },
                Prefix {
                    addr: 0x0A01_8000,
                    len: 17
                }
            ]
        );
        assert_eq!(
            prefix_split(Prefix { addr: 0, len: 40 }, &[1.0], 4).unwrap_err(),
            FilterError::BadPrefix(40)
        );
        // Every address of the base prefix is owned by exactly one node.
        for host in (0..65536u32).step_by(97) {
            let ip = 0x0A01_0000 | host;
            let owners = p
                .iter()
                .filter(|ps| ps.iter().any(|x| x.contains(ip)))
                .count();
            assert_eq!(owners, 1);
        }
    }
}
