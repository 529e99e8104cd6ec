//! Maglev consistent hashing (Eisenbud et al., NSDI'16, §3.4), weighted.

/// Default table size: a prime, so every backend's permutation visits every slot.
pub const DEFAULT_TABLE_SIZE: usize = 65537;

/// The largest table accepted: the largest prime below 2^20 (2 MiB of entries,
/// plus the per-backend permutation state while building). Maglev's own largest
/// is 655,373; an unbounded size let a typo allocate gigabytes and abort.
pub const MAX_TABLE_SIZE: usize = 1_048_573;

/// A 64-bit hash of `s` with `seed` (FNV-1a followed by a splitmix64 finaliser),
/// stable across processes and versions: instances must build identical tables.
pub fn hash_name(s: &str, seed: u64) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// True if `n` is prime (table sizes are checked at configuration time).
pub fn is_prime(n: usize) -> bool {
    if n < 2 {
        return false;
    }
    let mut d = 2;
    while d * d <= n {
        if (n / d) * d == n {
            return false;
        }
        d += 1;
    }
    true
}

/// Builds the lookup table: entry `j` is the index (into `names`) of the backend
/// owning slot `j`, or `u16::MAX` if no backend is eligible.
///
/// Backends take turns claiming their next preferred free slot, as in the paper's
/// Pseudocode 1; a backend of weight `w` gets `w / max_weight` turns per round (as
/// accumulated credit), so slot shares are proportional to weights. A backend with
/// `eligible[i] == false` (draining, weight 0) takes no turns but keeps its
/// position in `names`, so the other backends' permutations do not change.
pub fn build_table(names: &[String], weights: &[u32], eligible: &[bool], m: usize) -> Vec<u16> {
    let mut entry = vec![u16::MAX; m];
    let idx: Vec<usize> = (0..names.len())
        .filter(|&i| eligible[i] && weights[i] > 0)
        .collect();
    if idx.is_empty() || m == 0 {
        return entry;
    }
    let perm: Vec<(u64, u64)> = idx
        .iter()
        .map(|&i| {
            let offset = hash_name(&names[i], 0x6d61_676c_6576) % m as u64;
            let skip = hash_name(&names[i], 0x736b_6970) % (m as u64 - 1).max(1) + 1;
            (offset, skip)
        })
        .collect();
    let wmax = idx.iter().map(|&i| weights[i] as u64).max().unwrap_or(1);
    let mut next = vec![0u64; idx.len()];
    let mut credit = vec![0u64; idx.len()];
    let mut filled = 0;
    loop {
        for (k, &i) in idx.iter().enumerate() {
            credit[k] += weights[i] as u64;
            while credit[k] >= wmax {
                credit[k] -= wmax;
                let (offset, skip) = perm[k];
                loop {
                    let c = ((offset + next[k] * skip) % m as u64) as usize;
                    next[k] += 1;
                    if entry[c] == u16::MAX {
                        entry[c] = i as u16;
                        filled += 1;
                        break;
                    }
                }
                if filled == m {
                    return entry;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("10.0.0.{i}:80")).collect()
    }

    #[test]
    fn every_slot_is_filled_evenly() {
        let t = build_table(&names(5), &[1; 5], &[true; 5], 65537);
        let mut count = [0usize; 5];
        for &e in &t {
            count[e as usize] += 1;
        }
        assert!(
            count.iter().all(|&c| (13000..=13200).contains(&c)),
            "{count:?}"
        );
    }

    #[test]
    fn weights_are_proportional() {
        let t = build_table(&names(2), &[3, 1], &[true; 2], 65537);
        let a = t.iter().filter(|&&e| e == 0).count() as f64;
        let share = a / t.len() as f64;
        assert!((share - 0.75).abs() < 0.01, "{share}");
    }

    #[test]
    fn removing_one_backend_moves_about_one_nth() {
        let n = 10;
        let before = build_table(&names(n), &[1; 10], &[true; 10], 65537);
        let mut el = [true; 10];
        el[3] = false;
        let after = build_table(&names(n), &[1; 10], &el, 65537);
        let moved = before.iter().zip(&after).filter(|(a, b)| a != b).count();
        let frac = moved as f64 / before.len() as f64;
        assert!(after.iter().all(|&e| e != 3));
        // The removed backend's tenth must move; Maglev moves a little more.
        assert!((0.099..0.15).contains(&frac), "moved {frac}");
    }

    #[test]
    fn no_eligible_backend_gives_an_empty_table() {
        let t = build_table(&names(2), &[1, 1], &[false, false], 7);
        assert!(t.iter().all(|&e| e == u16::MAX));
        assert!(is_prime(65537) && !is_prime(65536));
    }
}
