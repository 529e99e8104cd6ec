//! How consolidated groups' flows are split among their hosts (CoMb §4's
//! network-wide load balancing, issue 27), sans-IO.
//!
//! A consolidated group (`consolidate:` in a tenant spec, a
//! [`sluice_tenant::consolidate::HYPERAPP`] middlebox) runs one instance per
//! host it is placed on, and its instances share the hosts' cores with
//! everything else placed there. CoMb assigns each class of traffic to the
//! boxes on its path in the fractions that minimise the most loaded box's
//! load (eqs. 5-8); here the boxes are the hosts of each group's instances,
//! a group's traffic is one class whose volume is the CPU its instances
//! were measured to use (the agents report each instance process's CPU time),
//! the rest of a host's load (every other instance on it, measured alike) is
//! a class pinned to that host, and each host provides its declared cores.
//! [`sluice_optimizer::comb::min_max_load`] solves it, the same code the
//! simulator's CoMb figures use; each group's fractions become its instances'
//! hash-range weights.
//!
//! A new split replaces the installed one only when it lowers the most loaded
//! host's predicted utilisation by [`MIN_GAIN`] or the groups' hosts changed
//! ([`adopt`]): moving flows costs store round trips, so small gains are not
//! worth it.

use std::collections::BTreeMap;

use sluice_optimizer::comb::{self, CombError, NetworkProblem, Strategy, TrafficClass};

/// A group's key: `(tenant, middlebox)`.
pub type GroupKey = (String, String);

/// Cores a host that declares none is taken to have: the split then
/// balances measured load alike on every host.
pub const UNDECLARED_CORES: f64 = 1.0;

/// The smallest drop of the worst host's predicted utilisation worth moving
/// flows for.
pub const MIN_GAIN: f64 = 0.05;

/// Parts per million: a group's shares per host add up to this.
pub const PPM: u32 = 1_000_000;

/// What the split is computed from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inputs {
    /// Each host's cores.
    pub cores: BTreeMap<u32, f64>,
    /// Per host, the cores its instances outside every group were measured
    /// to use.
    pub background: BTreeMap<u32, f64>,
    /// Per group, the hosts of its serving instances (a host once per
    /// instance) and the cores its instances were measured to use together.
    pub groups: BTreeMap<GroupKey, (Vec<u32>, f64)>,
}

/// A solved split.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Per group, its share of the hash space per host, parts per million.
    pub shares: BTreeMap<GroupKey, BTreeMap<u32, u32>>,
    /// The most loaded host's predicted utilisation (load over cores).
    pub worst: f64,
    /// The same with every instance of a group taking an even share.
    pub even: f64,
}

/// The hosts the problem spans, in order, and each one's index.
fn nodes(inputs: &Inputs) -> (Vec<u32>, BTreeMap<u32, usize>) {
    let mut hosts: Vec<u32> = inputs
        .groups
        .values()
        .flat_map(|(h, _)| h.iter().copied())
        .collect();
    hosts.sort_unstable();
    hosts.dedup();
    let index = hosts.iter().enumerate().map(|(i, h)| (*h, i)).collect();
    (hosts, index)
}

fn cores(inputs: &Inputs, h: u32) -> f64 {
    inputs
        .cores
        .get(&h)
        .copied()
        .filter(|c| c.is_finite() && *c > 0.0)
        .unwrap_or(UNDECLARED_CORES)
}

/// The most loaded host's utilisation if each group splits its measured load
/// by `shares` (ppm per host; a group without shares splits evenly over its
/// instances).
pub fn evaluate(inputs: &Inputs, shares: &BTreeMap<GroupKey, BTreeMap<u32, u32>>) -> f64 {
    let (hosts, _) = nodes(inputs);
    let mut load: BTreeMap<u32, f64> = hosts
        .iter()
        .map(|h| (*h, inputs.background.get(h).copied().unwrap_or(0.0)))
        .collect();
    for (key, (on, demand)) in &inputs.groups {
        if on.is_empty() {
            continue;
        }
        match shares.get(key) {
            Some(s) => {
                for (h, ppm) in s {
                    if let Some(l) = load.get_mut(h) {
                        *l += demand * f64::from(*ppm) / f64::from(PPM);
                    }
                }
            }
            None => {
                for h in on {
                    *load.get_mut(h).expect("a group's host is a node") += demand / on.len() as f64;
                }
            }
        }
    }
    load.iter()
        .map(|(h, l)| l / cores(inputs, *h))
        .fold(0.0, f64::max)
}

/// Solves the split (`None` when no group has two hosts to choose from or
/// nothing was measured).
pub fn plan(inputs: &Inputs) -> Result<Option<Plan>, CombError> {
    let (hosts, index) = nodes(inputs);
    let choice = inputs
        .groups
        .values()
        .any(|(on, demand)| *demand > 0.0 && on.iter().any(|h| on.first().is_some_and(|f| f != h)));
    if !choice {
        return Ok(None);
    }
    let keys: Vec<&GroupKey> = inputs.groups.keys().collect();
    // Hyperapp 0 is "anything else on the host"; group i is hyperapp i + 1.
    // Every footprint is one core per core of measured load.
    let mut classes = Vec::new();
    for (i, h) in hosts.iter().enumerate() {
        let bg = inputs.background.get(h).copied().unwrap_or(0.0);
        if bg > 0.0 {
            classes.push(TrafficClass {
                path: vec![i],
                volume: bg,
                hyperapp: 0,
            });
        }
    }
    let first_group = classes.len();
    for (g, key) in keys.iter().enumerate() {
        let (on, demand) = &inputs.groups[*key];
        let mut path: Vec<usize> = on.iter().map(|h| index[h]).collect();
        path.sort_unstable();
        path.dedup();
        classes.push(TrafficClass {
            path,
            volume: demand.max(0.0),
            hyperapp: g + 1,
        });
    }
    let problem = NetworkProblem {
        prov: hosts.iter().map(|h| vec![cores(inputs, *h)]).collect(),
        footprints: vec![vec![1.0]; keys.len() + 1],
        classes,
        node_footprints: Vec::new(),
    };
    let solved = comb::min_max_load(&problem, Strategy::Path, false)?;
    let mut shares = BTreeMap::new();
    for (g, key) in keys.iter().enumerate() {
        let fractions = &solved.fractions[first_group + g];
        let (on, demand) = &inputs.groups[*key];
        let row: BTreeMap<u32, u32> = if *demand > 0.0 {
            to_ppm(fractions.iter().map(|(n, d)| (hosts[*n], *d)))
        } else {
            // Nothing measured: even over its instances.
            to_ppm(on.iter().map(|h| (*h, 1.0)))
        };
        shares.insert((*key).clone(), row);
    }
    let worst = evaluate(inputs, &shares);
    let even = evaluate(inputs, &BTreeMap::new());
    Ok(Some(Plan {
        shares,
        worst,
        even,
    }))
}

/// Fractions per host (summing hosts named twice) as parts per million that
/// add up to [`PPM`] exactly (the rounding error goes to the largest).
fn to_ppm(parts: impl Iterator<Item = (u32, f64)>) -> BTreeMap<u32, u32> {
    let mut sum: BTreeMap<u32, f64> = BTreeMap::new();
    for (h, f) in parts {
        *sum.entry(h).or_default() += f.max(0.0);
    }
    let total: f64 = sum.values().sum();
    if total <= 0.0 {
        let n = sum.len().max(1) as f64;
        sum.values_mut().for_each(|v| *v = 1.0 / n);
    } else {
        sum.values_mut().for_each(|v| *v /= total);
    }
    let mut out: BTreeMap<u32, u32> = sum
        .iter()
        .map(|(h, f)| (*h, (f * f64::from(PPM)).round() as u32))
        .collect();
    let given: u32 = out.values().sum();
    if let Some((_, top)) = out.iter_mut().max_by_key(|(_, v)| **v) {
        *top = (*top + PPM).saturating_sub(given);
    }
    out
}

/// Whether `new` should replace the installed shares, whose predicted worst
/// utilisation is `current` (`None`: nothing installed, or the groups' hosts
/// changed since).
pub fn adopt(current: Option<f64>, new: &Plan) -> bool {
    match current {
        None => true,
        Some(c) => c - new.worst >= MIN_GAIN,
    }
}

/// Each rack's fraction of a group's flows under `network-aware`
/// distribution: its share in `ppm` (the distribution's solution, by rack),
/// or, for a rack it does not name (nothing solved yet), the rack's part of
/// the group's serving instances, as [`crate::distribution::weights`] lays
/// them out. `racks_of` has one entry per serving instance.
pub fn rack_fractions(
    racks_of: &[&str],
    ppm: Option<&BTreeMap<String, u32>>,
) -> BTreeMap<String, f64> {
    let n = racks_of.len() as f64;
    let mut count: BTreeMap<String, f64> = BTreeMap::new();
    for r in racks_of {
        *count.entry((*r).to_string()).or_default() += 1.0;
    }
    count
        .into_iter()
        .map(|(r, c)| {
            let f = ppm
                .and_then(|p| p.get(&r))
                .map_or(c / n, |p| f64::from(*p) / f64::from(PPM));
            (r, f)
        })
        .collect()
}

/// A group's shares per host with each rack's total set to `racks`' fraction
/// and the split inside a rack kept from `row` (a host `row` does not name
/// takes an even part of its rack's instances, as does every host of a rack
/// `row` gives nothing). Under `network-aware` distribution the racks'
/// fractions come from the distribution's LP and change on their own
/// schedule; CoMb's split only ever decides how a rack's part is shared.
/// `hosts` has one entry per serving instance.
pub fn within_racks(
    row: &BTreeMap<u32, u32>,
    hosts: &[u32],
    rack_of: &dyn Fn(u32) -> String,
    racks: &BTreeMap<String, f64>,
) -> BTreeMap<u32, u32> {
    let mut per_host: BTreeMap<u32, f64> = BTreeMap::new();
    for h in hosts {
        *per_host.entry(*h).or_default() += 1.0;
    }
    let mut by_rack: BTreeMap<String, Vec<(u32, f64)>> = BTreeMap::new();
    for (h, n) in &per_host {
        by_rack.entry(rack_of(*h)).or_default().push((*h, *n));
    }
    let mut parts = Vec::new();
    for (r, members) in by_rack {
        let fraction = racks.get(&r).copied().unwrap_or(0.0);
        let given: f64 = members
            .iter()
            .map(|(h, _)| f64::from(row.get(h).copied().unwrap_or(0)))
            .sum();
        let instances: f64 = members.iter().map(|(_, n)| n).sum();
        let all_named = members.iter().all(|(h, _)| row.contains_key(h));
        for (h, n) in members {
            let inside = if given > 0.0 && all_named {
                f64::from(row[&h]) / given
            } else {
                n / instances
            };
            parts.push((h, fraction * inside));
        }
    }
    to_ppm(parts.into_iter())
}

/// [`plan`] under `network-aware` distribution: every group's flows are
/// first divided among racks by `racks` (per group, each rack's fraction,
/// from [`rack_fractions`]), and CoMb's LP then splits each rack's part
/// among that rack's hosts, one problem per rack (a host is in one rack, so
/// the racks' problems share nothing). The racks' fractions decide what
/// crosses the uplinks; the LP only balances the cores inside a rack.
pub fn plan_within_racks(
    inputs: &Inputs,
    rack_of: &dyn Fn(u32) -> String,
    racks: &BTreeMap<GroupKey, BTreeMap<String, f64>>,
) -> Result<Option<Plan>, CombError> {
    let (hosts, _) = nodes(inputs);
    let mut rack_names: Vec<String> = hosts.iter().map(|h| rack_of(*h)).collect();
    rack_names.sort();
    rack_names.dedup();
    // Per group, each host's fraction of the whole group inside its rack.
    let mut inside: BTreeMap<GroupKey, BTreeMap<u32, u32>> = BTreeMap::new();
    let mut any = false;
    for r in &rack_names {
        let in_rack = |h: &u32| rack_of(*h) == *r;
        let mut sub = Inputs::default();
        for h in hosts.iter().filter(|h| in_rack(h)) {
            if let Some(c) = inputs.cores.get(h) {
                sub.cores.insert(*h, *c);
            }
            if let Some(b) = inputs.background.get(h) {
                sub.background.insert(*h, *b);
            }
        }
        for (key, (on, demand)) in &inputs.groups {
            let here: Vec<u32> = on.iter().copied().filter(in_rack).collect();
            if here.is_empty() {
                continue;
            }
            let fraction = racks
                .get(key)
                .and_then(|f| f.get(r))
                .copied()
                .unwrap_or(here.len() as f64 / on.len() as f64);
            sub.groups.insert(key.clone(), (here, demand * fraction));
        }
        if let Some(p) = plan(&sub)? {
            any = true;
            for (key, row) in p.shares {
                inside.entry(key).or_default().extend(row);
            }
        }
    }
    if !any {
        return Ok(None);
    }
    let mut shares = BTreeMap::new();
    let mut even = BTreeMap::new();
    for (key, (on, _)) in &inputs.groups {
        let fractions = racks.get(key).cloned().unwrap_or_else(|| {
            let names: Vec<String> = on.iter().map(|h| rack_of(*h)).collect();
            rack_fractions(&names.iter().map(String::as_str).collect::<Vec<_>>(), None)
        });
        let none = BTreeMap::new();
        let row = inside.get(key).unwrap_or(&none);
        shares.insert(key.clone(), within_racks(row, on, rack_of, &fractions));
        even.insert(key.clone(), within_racks(&none, on, rack_of, &fractions));
    }
    Ok(Some(Plan {
        worst: evaluate(inputs, &shares),
        even: evaluate(inputs, &even),
        shares,
    }))
}

/// Group weights of a group's instances on `hosts` (one entry per instance,
/// in order) from its shares per host: each host's share split evenly among
/// its instances there, scaled so that an even split gives `base` each.
/// `None` when a host has no share (the shares are for other hosts).
pub fn weights(hosts: &[u32], ppm: &BTreeMap<u32, u32>, base: u32) -> Option<Vec<u32>> {
    let mut per_host: BTreeMap<u32, usize> = BTreeMap::new();
    for h in hosts {
        *per_host.entry(*h).or_default() += 1;
    }
    let n = hosts.len() as f64;
    hosts
        .iter()
        .map(|h| {
            let share = f64::from(*ppm.get(h)?) / f64::from(PPM);
            let each = share / per_host[h] as f64;
            Some((each * n * f64::from(base)).round() as u32)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(mb: &str) -> GroupKey {
        ("t".to_string(), mb.to_string())
    }

    #[test]
    fn a_busy_host_gets_less_of_a_group() {
        // Two hosts of 4 cores; host 1 also runs 2 cores of other work. The
        // group's 4 cores of load go 1 : 3 so both end at 75%.
        let inputs = Inputs {
            cores: [(1, 4.0), (2, 4.0)].into(),
            background: [(1, 2.0)].into(),
            groups: [(key("edge"), (vec![1, 2], 4.0))].into(),
        };
        let p = plan(&inputs).unwrap().unwrap();
        let s = &p.shares[&key("edge")];
        assert_eq!(s.values().sum::<u32>(), PPM);
        assert!((f64::from(s[&1]) / 1e6 - 0.25).abs() < 1e-3, "{s:?}");
        assert!((p.worst - 0.75).abs() < 1e-3, "{p:?}");
        // Even: host 1 at (2 + 2) / 4.
        assert!((p.even - 1.0).abs() < 1e-9, "{p:?}");
        assert!(adopt(Some(p.even), &p));
        assert!(!adopt(Some(p.worst + 0.01), &p));
    }

    #[test]
    fn groups_sharing_hosts_are_balanced_together() {
        // a is on hosts 1 and 2, b only on host 2 (6 of its 8 cores): any
        // of a on host 2 would raise the worst host, so all of a goes to 1.
        let inputs = Inputs {
            cores: [(1, 8.0), (2, 8.0)].into(),
            background: BTreeMap::new(),
            groups: [(key("a"), (vec![1, 2], 4.0)), (key("b"), (vec![2], 6.0))].into(),
        };
        let p = plan(&inputs).unwrap().unwrap();
        assert_eq!(p.shares[&key("b")], [(2, PPM)].into());
        let a = &p.shares[&key("a")];
        assert!((f64::from(a[&1]) / 1e6 - 1.0).abs() < 1e-3, "{a:?}");
        assert!((p.worst - 0.75).abs() < 1e-3, "{p:?}");
        // Even, host 2 carries 2 + 6 of its 8 cores.
        assert!((p.even - 1.0).abs() < 1e-9, "{p:?}");
    }

    #[test]
    fn declared_cores_weigh_hosts() {
        // No background: shares follow cores (2 : 6).
        let inputs = Inputs {
            cores: [(1, 2.0), (2, 6.0)].into(),
            background: BTreeMap::new(),
            groups: [(key("g"), (vec![1, 2], 4.0))].into(),
        };
        let p = plan(&inputs).unwrap().unwrap();
        let s = &p.shares[&key("g")];
        assert!((f64::from(s[&2]) / 1e6 - 0.75).abs() < 1e-3, "{s:?}");
    }

    #[test]
    fn nothing_to_choose_or_nothing_measured_is_no_plan() {
        let one_host = Inputs {
            groups: [(key("g"), (vec![3, 3], 2.0))].into(),
            ..Inputs::default()
        };
        assert_eq!(plan(&one_host).unwrap(), None);
        let idle = Inputs {
            groups: [(key("g"), (vec![1, 2], 0.0))].into(),
            ..Inputs::default()
        };
        assert_eq!(plan(&idle).unwrap(), None);
    }

    fn rack_ab(h: u32) -> String {
        if h <= 2 { "a" } else { "b" }.to_string()
    }

    #[test]
    fn under_network_aware_distribution_the_racks_keep_their_parts() {
        // The distribution gave rack a 75% of the group, rack b 25%. Inside
        // a, hosts of 2 and 6 cores split a's part 1 : 3; inside b, two
        // hosts of 4 cores split evenly.
        let inputs = Inputs {
            cores: [(1, 2.0), (2, 6.0), (3, 4.0), (4, 4.0)].into(),
            background: BTreeMap::new(),
            groups: [(key("g"), (vec![1, 2, 3, 4], 4.0))].into(),
        };
        let racks = [(
            key("g"),
            [("a".to_string(), 0.75), ("b".to_string(), 0.25)].into(),
        )]
        .into();
        let p = plan_within_racks(&inputs, &rack_ab, &racks)
            .unwrap()
            .unwrap();
        let s = &p.shares[&key("g")];
        assert_eq!(s.values().sum::<u32>(), PPM);
        let f = |h: u32| f64::from(s[&h]) / 1e6;
        assert!((f(1) + f(2) - 0.75).abs() < 1e-3, "{s:?}");
        assert!((f(1) - 0.1875).abs() < 1e-3, "{s:?}");
        assert!(
            (f(3) - 0.125).abs() < 1e-3 && (f(4) - 0.125).abs() < 1e-3,
            "{s:?}"
        );
        // 3 cores of load in rack a over its 8 cores; evenly inside it,
        // host 1 would carry 1.5 of its 2.
        assert!((p.worst - 0.375).abs() < 1e-3, "{p:?}");
        assert!((p.even - 0.75).abs() < 1e-3, "{p:?}");
        // When the distribution moves the racks' parts, the split inside
        // each rack stays.
        let moved = within_racks(
            s,
            &[1, 2, 3, 4],
            &rack_ab,
            &[("a".to_string(), 0.5), ("b".to_string(), 0.5)].into(),
        );
        let g = |h: u32| f64::from(moved[&h]) / 1e6;
        assert!(
            (g(1) - 0.125).abs() < 1e-3 && (g(2) - 0.375).abs() < 1e-3,
            "{moved:?}"
        );
        assert!((g(3) - 0.25).abs() < 1e-3, "{moved:?}");
    }

    #[test]
    fn a_rack_with_one_host_or_nothing_solved_splits_by_instances() {
        // Rack a has hosts 1 (two instances) and 2; rack b host 3 alone.
        // Nothing is solved inside a (no row): host 1 gets two thirds of a.
        let racks = rack_fractions(&["a", "a", "a", "b"], None);
        assert!((racks["a"] - 0.75).abs() < 1e-9 && (racks["b"] - 0.25).abs() < 1e-9);
        let row = within_racks(&BTreeMap::new(), &[1, 1, 2, 3], &rack_ab, &racks);
        assert_eq!(row, [(1, 500_000), (2, 250_000), (3, 250_000)].into());
        // A solved rack share wins over the instance count.
        let solved = [("a".to_string(), 100_000)].into();
        let racks = rack_fractions(&["a", "b"], Some(&solved));
        assert!((racks["a"] - 0.1).abs() < 1e-9 && (racks["b"] - 0.5).abs() < 1e-9);
    }

    #[test]
    fn weights_split_a_host_share_among_its_instances() {
        // Host 1 has 2 instances and half the space; host 2 one and half.
        let w = weights(&[1, 1, 2], &[(1, PPM / 2), (2, PPM / 2)].into(), 64).unwrap();
        assert_eq!(w, [48, 48, 96]);
        // Even shares give the base weight.
        let w = weights(&[1, 2], &[(1, PPM / 2), (2, PPM / 2)].into(), 64).unwrap();
        assert_eq!(w, [64, 64]);
        assert_eq!(weights(&[1, 3], &[(1, PPM)].into(), 64), None);
        assert_eq!(
            to_ppm([(1, 1.0), (2, 2.0)].into_iter())
                .values()
                .sum::<u32>(),
            PPM
        );
    }
}
