//! How a middlebox's flows are split among its instances (the controller's
//! `distribution` setting), sans-IO.
//!
//! `uniform` (the default) gives every instance of a middlebox an equal range
//! of the flow-hash space, in placement order, whatever the network between
//! them. `network-aware` (Stratos §4.2, issue 27) lays every middlebox's split
//! out **rack by rack in one rack order** and chooses each rack's share with
//! [`sluice_optimizer::aligned`]: a flow whose hash falls in rack `k`'s range
//! at one middlebox falls in rack `k`'s range at the next, so between
//! middleboxes it stays in its rack as far as the shares allow, while both
//! directions of a flow still hash alike on every host (the split is the same
//! everywhere; see the optimiser's module docs for why it is not one split per
//! previous hop).
//!
//! The shares come from what the agents measure: the bytes per second
//! entering each chain from the VMs of each rack, in each direction (the
//! requests' racks are where the chain's traffic enters, the replies' where
//! it leaves), and the rack uplinks' capacities the operator declared. An
//! instance may take more than an even share up to its middlebox's declared
//! `capacity`, or by [`DEFAULT_SLACK`] when it declares none.
//!
//! With declared uplinks and a **target utilisation** (the `uplink_target`
//! setting; none by default, [`DEFAULT_TARGET`]), the shares leave the even
//! split only to keep the worst uplink under the target, and no further: an
//! uplink below it is no bottleneck, and piling flows on one rack's
//! instances can make their hosts one. Without a target, or with no uplink
//! declared (every uplink then weighs alike), the worst uplink's load is
//! minimised outright, then the bytes crossing racks.
//!
//! A new solution replaces the installed one only when the instances' racks
//! changed, when it lowers the worst uplink's load (its excess over the
//! target) by [`MIN_GAIN`], or, with every uplink within its target, when it
//! brings the shares back towards even by [`MIN_REBALANCE`] of the hash space
//! ([`adopt`]): moving a flow's range costs a store round trip for its state
//! (and, for `state: cached`, its ownership leases), so small gains are not
//! worth it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sluice_optimizer::aligned::{self, AlignedError, End, Evaluation, Hop, Problem, Stage};
use sluice_tenant::{Element, TenantSpec};

/// How flows are split among a middlebox's instances.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Distribution {
    /// Equal ranges in placement order (Stratos's uniform scheme).
    #[default]
    Uniform,
    /// Ranges laid out rack by rack, shares from the aligned LP.
    NetworkAware,
}

impl Distribution {
    /// The setting's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Distribution::Uniform => "uniform",
            Distribution::NetworkAware => "network-aware",
        }
    }
}

impl std::fmt::Display for Distribution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A distribution name that is neither `uniform` nor `network-aware`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown distribution `{0}`: use uniform or network-aware")]
pub struct UnknownDistribution(pub String);

impl std::str::FromStr for Distribution {
    type Err = UnknownDistribution;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "uniform" => Ok(Distribution::Uniform),
            "network-aware" => Ok(Distribution::NetworkAware),
            other => Err(UnknownDistribution(other.to_string())),
        }
    }
}

/// The controller's distribution settings (`--distribution`,
/// `--rack-uplink`, `--uplink-target`).
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// How middleboxes split their flows.
    pub policy: Distribution,
    /// Declared uplink capacity per rack, bytes per second.
    pub uplinks: BTreeMap<String, f64>,
    /// The utilisation of a declared uplink below which it is no bottleneck
    /// (a fraction of its capacity).
    pub target: f64,
    /// Split the flows of a chain to servers in several racks by their
    /// server's rack ([`classed`]; default on).
    pub classes: bool,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            policy: Distribution::default(),
            uplinks: BTreeMap::new(),
            target: DEFAULT_TARGET,
            classes: true,
        }
    }
}

/// The default target utilisation of a declared uplink: none (0), i.e. the
/// worst uplink is minimised outright, then the bytes crossing racks
/// (Stratos's objective). Measured on the testbed (docs/REPRODUCTION.md),
/// a target of 50% kept shares even with free uplinks and served 1.00-1.05x
/// today's policy where that policy had packed into the wrong rack, but
/// 0.77-0.90x where it had packed into the clients' rack: crossing racks
/// costs the hosts' CPU there (bridges and veth pairs on shared cores), and
/// even shares cross for half the flows. Operators whose hosts, not links,
/// are the bottleneck set a target (0.5 is a usual planning headroom:
/// shares are solved from measured rates, and a full uplink carries what it
/// lets through, not what is asked of it, so relieving it to half leaves
/// room for the demand it hid).
pub const DEFAULT_TARGET: f64 = 0.0;

/// A planning headroom for [`Settings::target`]: half of the uplink.
pub const HALF: f64 = 0.5;

/// Parses a target utilisation: a fraction (`0.5`) or a percentage (`50%`),
/// from 0 (minimise the worst utilisation outright, Stratos's objective) to
/// 1.
pub fn parse_target(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, scale) = match t.strip_suffix('%') {
        Some(p) => (p.trim(), 100.0),
        None => (t, 1.0),
    };
    num.parse::<f64>()
        .ok()
        .map(|x| x / scale)
        .filter(|x| x.is_finite() && (0.0..=1.0).contains(x))
        .ok_or_else(|| format!("`{s}`: the target is a fraction from 0 to 1 (or 0% to 100%)"))
}

/// Parses rack uplink capacities, `RACK=MBIT[,RACK=MBIT...]`, into bytes per
/// second by rack.
pub fn parse_uplinks(s: &str) -> Result<BTreeMap<String, f64>, String> {
    let mut out = BTreeMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (rack, mbit) = part
            .split_once('=')
            .ok_or_else(|| format!("`{part}`: expected RACK=MBIT"))?;
        let rack = rack.trim();
        if rack.is_empty() {
            return Err(format!("`{part}`: the rack name is empty"));
        }
        let m: f64 = mbit
            .trim()
            .parse()
            .ok()
            .filter(|m: &f64| m.is_finite() && *m > 0.0)
            .ok_or_else(|| format!("`{part}`: the capacity must be a positive number of Mbit/s"))?;
        if out.insert(rack.to_string(), m * 1e6 / 8.0).is_some() {
            return Err(format!("rack `{rack}` is given twice"));
        }
    }
    Ok(out)
}

/// Headroom of an instance over its even share when its middlebox declares no
/// `capacity`: up to twice the even share. Zero would be Stratos's exact
/// balance, where only the layout (not the shares) can follow the racks, and
/// a chain whose clients sit in one rack would cross racks at every request
/// that hashes to the other rack's instances; unbounded would let the LP
/// pile a middlebox's flows on a few instances of a large middlebox and make
/// them the bottleneck the uplink was. (With two instances, twice the even
/// share is all of it: the other rack's instance then stands by.) A
/// declared `capacity` replaces this bound.
pub const DEFAULT_SLACK: f64 = 1.0;

/// Least relative drop of the worst uplink utilisation (or of its excess
/// over the target) for which flows are moved to a new split.
pub const MIN_GAIN: f64 = 0.10;

/// Least part of the hash space (averaged over middleboxes) a new split must
/// bring back towards even shares, with every uplink within its target, for
/// flows to be moved to it.
pub const MIN_REBALANCE: f64 = 0.05;

/// Shares are kept in parts per million (the desired state compares exactly).
pub const PPM: u32 = 1_000_000;

/// The rack of a host that declared none: all such hosts form one domain.
pub const NO_RACK: &str = "";

/// Bytes per second entering one chain from the VMs of each rack (or the
/// gateway's), in its forward direction and in reverse.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChainRates {
    /// Requests: where the chain's source sends from.
    pub forward: BTreeMap<String, f64>,
    /// Replies: where the chain's destination answers from.
    pub reverse: BTreeMap<String, f64>,
}

/// What a tenant's distribution is computed from.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// Racks of each middlebox's instances that take new flows, by middlebox.
    pub instances: BTreeMap<String, Vec<String>>,
    /// Rack of each of the tenant's VMs, by name.
    pub vms: BTreeMap<String, String>,
    /// Rack of the tenant's gateway (where external traffic enters).
    pub gateway: Option<String>,
    /// Measured rates per chain, by chain index in the spec (missing: none
    /// measured yet; the VMs' racks then stand in, one unit each way).
    pub rates: BTreeMap<usize, ChainRates>,
    /// Declared uplink capacity per rack, bytes per second (missing: the
    /// largest declared, or 1 when none is: equal uplinks).
    pub uplinks: BTreeMap<String, f64>,
    /// The target utilisation of declared uplinks ([`Settings::target`]);
    /// unused when none is declared.
    pub target: f64,
    /// Split flows by their server's rack ([`Settings::classes`]).
    pub classes: bool,
}

/// A tenant's split: each middlebox's share of the hash space per rack.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The racks, in the layout's order.
    pub racks: Vec<String>,
    /// Per middlebox, its share per rack (same order as `racks`): the split
    /// of its flows in no class (see [`Plan::classes`]), or, when all its
    /// flows are classed, the classes' traffic-weighted sum (what its
    /// flows unclassed after all, e.g. to an address no class names, use).
    pub shares: BTreeMap<String, Vec<f64>>,
    /// Per middlebox and class (the rack of the servers the flows are
    /// for), that class's split: [`problem`] says which flows are classed.
    pub classes: BTreeMap<(String, String), Vec<f64>>,
    /// The uplinks' predicted loads under this plan.
    pub predicted: Evaluation,
    /// What even shares (the layout alone) would give.
    pub even: Evaluation,
}

/// Shares per rack, in parts per million by rack name.
fn to_ppm(racks: &[String], row: &[f64]) -> BTreeMap<String, u32> {
    racks
        .iter()
        .zip(row)
        .map(|(r, s)| (r.clone(), (s * f64::from(PPM)).round() as u32))
        .collect()
}

impl Plan {
    /// The shares in parts per million by rack name, as the desired state
    /// keeps them.
    pub fn ppm(&self) -> BTreeMap<String, BTreeMap<String, u32>> {
        self.shares
            .iter()
            .map(|(mb, row)| (mb.clone(), to_ppm(&self.racks, row)))
            .collect()
    }

    /// The classes' shares in parts per million, by (middlebox, class).
    pub fn class_ppm(&self) -> BTreeMap<(String, String), BTreeMap<String, u32>> {
        self.classes
            .iter()
            .map(|(k, row)| (k.clone(), to_ppm(&self.racks, row)))
            .collect()
    }
}

/// A stage of the distribution problem: one split of a middlebox's flows,
/// either of all of them not in a class (`class: None`), or of the class of
/// flows to the servers of one rack.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct StageKey {
    /// The middlebox.
    pub mb: String,
    /// The rack of the servers whose flows the split is for.
    pub class: Option<String>,
}

/// Functions that rewrite a flow's addresses: the server a flow is for is
/// known only after the last of them (a load balancer picks it; after a NAT
/// the flow hashes anew), so only the middleboxes after it can split by it.
pub const REWRITERS: &[&str] = &["lb", "nat"];

/// The middleboxes of chain `chain` whose flows are split by class (the
/// rack of the server each flow is for), in path order: those after the
/// last one that rewrites addresses ([`REWRITERS`]), keeps `state:
/// cached` (its ownership leases are ranges of one split) or is a
/// consolidated group; none when the
/// chain's destination is not a service whose VMs span several racks of
/// `vm_racks`.
pub fn classed(
    spec: &TenantSpec,
    chain: &sluice_tenant::Chain,
    vm_racks: &BTreeMap<String, String>,
) -> Vec<String> {
    let Some(Element::Service { vms }) = chain.path.last().and_then(|d| spec.elements.get(d))
    else {
        return Vec::new();
    };
    let mut racks: Vec<&String> = vms.iter().filter_map(|v| vm_racks.get(&v.name)).collect();
    racks.sort();
    racks.dedup();
    if racks.len() < 2 {
        return Vec::new();
    }
    let mbs: Vec<&str> = chain.middleboxes(spec).collect();
    let after = mbs
        .iter()
        .rposition(|m| match spec.elements.get(*m) {
            // A consolidated group is split among its hosts by CoMb's LP,
            // one split of its own.
            Some(Element::Middlebox {
                function, state, ..
            }) => {
                REWRITERS.contains(&function.as_str())
                    || function == sluice_tenant::consolidate::HYPERAPP
                    || *state == sluice_tenant::StateMode::Cached
            }
            _ => true,
        })
        .map_or(0, |i| i + 1);
    mbs[after..].iter().map(|m| m.to_string()).collect()
}

/// The LP of `spec` over `inputs`, the racks, and its stages in order (None
/// when there is nothing to choose: fewer than two racks, or no chain
/// through a middlebox).
///
/// A chain to a service whose VMs span several racks splits the flows of
/// its [`classed`] middleboxes by the rack of the server each is for: one
/// stage per (middlebox, rack), so the flows to a rack's servers can cross
/// the middleboxes in that rack while those to another's stay in theirs,
/// which one split per middlebox cannot do (it would have to choose one
/// rack for both). A class's part of the chain's traffic is its servers'
/// part of the measured replies (the replies enter the chain at the
/// servers' hosts), or of the servers before anything is measured. A
/// middlebox's stages share its instances: they are one [`aligned::Pool`].
pub fn problem(
    spec: &TenantSpec,
    inputs: &Inputs,
) -> Option<(Problem, Vec<String>, Vec<StageKey>)> {
    let mut racks: Vec<String> = inputs.instances.values().flatten().cloned().collect();
    racks.extend(inputs.vms.values().cloned());
    racks.extend(inputs.gateway.iter().cloned());
    racks.sort();
    racks.dedup();
    if racks.len() < 2 {
        return None;
    }
    let index = |r: &str| racks.iter().position(|x| x == r);
    let serving = |m: &str| inputs.instances.get(m).is_some_and(|v| !v.is_empty());
    // Racks of an endpoint element, weighted by the rates measured there (or
    // by its VMs when nothing was).
    let endpoint = |name: &str, rates: Option<&BTreeMap<String, f64>>| -> Option<Vec<f64>> {
        let mut v = vec![0.0; racks.len()];
        if let Some(r) = rates.filter(|r| r.values().sum::<f64>() > 0.0) {
            for (rack, x) in r {
                v[index(rack)?] += x;
            }
        } else {
            match spec.elements.get(name)? {
                Element::Service { vms } => {
                    for vm in vms {
                        v[index(inputs.vms.get(&vm.name)?)?] += 1.0;
                    }
                }
                Element::External { .. } => v[index(inputs.gateway.as_deref()?)?] += 1.0,
                _ => return None,
            }
        }
        let t: f64 = v.iter().sum();
        (t > 0.0).then(|| v.into_iter().map(|x| x / t).collect())
    };
    let mut keys: Vec<StageKey> = Vec::new();
    let mut stage = |k: StageKey| -> usize {
        match keys.iter().position(|x| *x == k) {
            Some(i) => i,
            None => {
                keys.push(k);
                keys.len() - 1
            }
        }
    };
    let mut hops = Vec::new();
    let mut through: BTreeMap<usize, f64> = BTreeMap::new();
    for (i, chain) in spec.chains.iter().enumerate() {
        let mbs: Vec<&str> = chain.middleboxes(spec).filter(|m| serving(m)).collect();
        if mbs.is_empty() {
            continue;
        }
        let rates = inputs.rates.get(&i);
        let measured = rates.map_or(0.0, |r| {
            r.forward.values().sum::<f64>() + r.reverse.values().sum::<f64>()
        });
        let (fwd, rev) = match rates {
            Some(r) if measured > 0.0 => (r.forward.values().sum(), r.reverse.values().sum()),
            _ => (1.0, 1.0),
        };
        // Replies of a one-way chain do not cross its middleboxes.
        let rev = if chain.bidirectional { rev } else { 0.0 };
        let (Some(src), Some(dst)) = (chain.path.first(), chain.path.last()) else {
            continue;
        };
        let Some(from) = endpoint(src, rates.map(|r| &r.forward)) else {
            continue;
        };
        let Some(to) = endpoint(dst, rates.map(|r| &r.reverse)) else {
            continue;
        };
        let classed = if inputs.classes {
            classed(spec, chain, &inputs.vms)
        } else {
            Vec::new()
        };
        let mut prev = End::Fixed(from);
        let mut first_classed = mbs.len();
        for (k, m) in mbs.iter().enumerate() {
            if classed.iter().any(|c| c == m) {
                first_classed = k;
                break;
            }
            let g = stage(StageKey {
                mb: m.to_string(),
                class: None,
            });
            *through.entry(g).or_default() += fwd + rev;
            hops.push(Hop {
                from: prev,
                to: End::Stage(g),
                forward: fwd,
                reverse: rev,
            });
            prev = End::Stage(g);
        }
        if first_classed == mbs.len() {
            hops.push(Hop {
                from: prev,
                to: End::Fixed(to),
                forward: fwd,
                reverse: rev,
            });
            continue;
        }
        // Each class: its part of the traffic, through its own stages, to
        // its rack's servers.
        for (r, part) in to.iter().enumerate().filter(|x| *x.1 > 0.0) {
            let (f, b) = (fwd * part, rev * part);
            let mut at = prev.clone();
            for m in &mbs[first_classed..] {
                let g = stage(StageKey {
                    mb: m.to_string(),
                    class: Some(racks[r].clone()),
                });
                *through.entry(g).or_default() += f + b;
                hops.push(Hop {
                    from: at,
                    to: End::Stage(g),
                    forward: f,
                    reverse: b,
                });
                at = End::Stage(g);
            }
            let mut end = vec![0.0; racks.len()];
            end[r] = 1.0;
            hops.push(Hop {
                from: at,
                to: End::Fixed(end),
                forward: f,
                reverse: b,
            });
        }
    }
    if hops.is_empty() {
        return None;
    }
    let measured = inputs.rates.values().any(|r| !r.forward.is_empty());
    // A middlebox's instances per rack, and the most of its flows each
    // rack's instances may take.
    let bound = |m: &str, load: f64| -> Stage {
        let mut counts = vec![0u32; racks.len()];
        for r in &inputs.instances[m] {
            if let Some(k) = index(r) {
                counts[k] += 1;
            }
        }
        let mut st = Stage::with_slack(counts, DEFAULT_SLACK);
        // A declared per-instance capacity bounds a rack's share by what
        // its instances can take of the traffic through the middlebox;
        // never below the even share, so an overloaded middlebox stays
        // balanced (scaling out is the answer to that, not a skewed split).
        if let Some(cap) = inputs_capacity(spec, m) {
            if load > 0.0 && measured {
                let even = st.even();
                for (k, n) in st.instances.iter().enumerate() {
                    st.max_share[k] = (f64::from(*n) * cap / load).min(1.0).max(even[k]);
                }
            }
        }
        st
    };
    let mut stages = Vec::with_capacity(keys.len());
    let mut pools = Vec::new();
    let mut done: Vec<&str> = Vec::new();
    for key in &keys {
        let mine: Vec<usize> = (0..keys.len()).filter(|&g| keys[g].mb == key.mb).collect();
        let load: f64 = mine
            .iter()
            .map(|g| through.get(g).copied().unwrap_or(0.0))
            .sum();
        let st = bound(&key.mb, load);
        if mine.len() == 1 && key.class.is_none() {
            stages.push(st);
            continue;
        }
        // Several splits share the middlebox's instances: the pool bears
        // the bound, each split may use any instance.
        stages.push(Stage {
            max_share: st
                .instances
                .iter()
                .map(|&n| if n > 0 { 1.0 } else { 0.0 })
                .collect(),
            instances: st.instances.clone(),
        });
        if !done.contains(&key.mb.as_str()) {
            done.push(&key.mb);
            pools.push(aligned::Pool {
                stages: mine
                    .iter()
                    .map(|&g| {
                        let t = through.get(&g).copied().unwrap_or(0.0);
                        (g, if load > 0.0 { t / load } else { 0.0 })
                    })
                    .collect(),
                max_share: st.max_share,
            });
        }
    }
    let declared = inputs
        .uplinks
        .values()
        .copied()
        .filter(|c| c.is_finite() && *c > 0.0)
        .fold(0.0, f64::max);
    let default_uplink = if declared > 0.0 { declared } else { 1.0 };
    let uplinks = racks
        .iter()
        .map(|r| {
            inputs
                .uplinks
                .get(r)
                .copied()
                .filter(|c| c.is_finite() && *c > 0.0)
                .unwrap_or(default_uplink)
        })
        .collect();
    // A target is a fraction of a real capacity: without one declared,
    // utilisations are relative and only the worst can be minimised.
    let target = (declared > 0.0).then_some(inputs.target);
    Some((
        Problem {
            uplinks,
            stages,
            hops,
            target,
            pools,
        },
        racks,
        keys,
    ))
}

/// A middlebox's declared per-instance capacity in bytes per second.
fn inputs_capacity(spec: &TenantSpec, mb: &str) -> Option<f64> {
    match spec.elements.get(mb)? {
        Element::Middlebox {
            capacity: Some(c), ..
        } => c.mbps.map(|m| m * 1e6 / 8.0),
        _ => None,
    }
}

/// Solves a tenant's split (None: nothing to choose, see [`problem`]).
pub fn plan(spec: &TenantSpec, inputs: &Inputs) -> Result<Option<Plan>, AlignedError> {
    let Some((p, racks, keys)) = problem(spec, inputs) else {
        return Ok(None);
    };
    let sol = aligned::solve(&p)?;
    let even = aligned::evaluate(&p, &p.even());
    let mut shares = BTreeMap::new();
    let mut classes = BTreeMap::new();
    for (g, key) in keys.iter().enumerate() {
        match &key.class {
            None => {
                shares.insert(key.mb.clone(), sol.shares[g].clone());
            }
            Some(c) => {
                classes.insert((key.mb.clone(), c.clone()), sol.shares[g].clone());
            }
        }
    }
    // A middlebox all of whose flows are classed: its own split (for what
    // no class names) is the classes' traffic-weighted sum.
    for pool in &p.pools {
        let mb = &keys[pool.stages[0].0].mb;
        if shares.contains_key(mb) {
            continue;
        }
        let mut sum = vec![0.0; racks.len()];
        for &(g, w) in &pool.stages {
            for (k, x) in sol.shares[g].iter().enumerate() {
                sum[k] += w * x;
            }
        }
        let t: f64 = sum.iter().sum();
        if t > 0.0 {
            sum.iter_mut().for_each(|x| *x /= t);
        } else {
            sum = p.stages[pool.stages[0].0].even();
        }
        shares.insert(mb.clone(), sum);
    }
    Ok(Some(Plan {
        racks,
        shares,
        classes,
        predicted: sol.evaluation,
        even,
    }))
}

/// The uplink loads `installed` (ppm per rack, per middlebox, and per
/// middlebox and class) gives under the problem of `spec` and `inputs`;
/// None when it no longer fits it (a stage or rack without a share, or a
/// share for a rack without its instances): then any new plan must be
/// adopted.
pub fn evaluate_installed(
    spec: &TenantSpec,
    inputs: &Inputs,
    installed: &BTreeMap<String, BTreeMap<String, u32>>,
    installed_classes: &BTreeMap<(String, String), BTreeMap<String, u32>>,
) -> Option<Evaluation> {
    let (p, racks, keys) = problem(spec, inputs)?;
    // A class split installed that the problem no longer has (classes
    // turned off, a server moved racks): what is installed does not fit.
    for (mb, c) in installed_classes.keys() {
        let class = Some(c.clone());
        if !keys.iter().any(|k| k.mb == *mb && k.class == class) {
            return None;
        }
    }
    let mut shares = Vec::with_capacity(keys.len());
    for (g, key) in keys.iter().enumerate() {
        let per = match &key.class {
            None => installed.get(&key.mb)?,
            Some(c) => installed_classes.get(&(key.mb.clone(), c.clone()))?,
        };
        let row: Vec<f64> = racks
            .iter()
            .map(|r| f64::from(per.get(r).copied().unwrap_or(0)) / f64::from(PPM))
            .collect();
        for (k, s) in row.iter().enumerate() {
            if *s > 0.0 && p.stages[g].instances[k] == 0 {
                return None;
            }
        }
        let t: f64 = row.iter().sum();
        if t <= 0.0 {
            return None;
        }
        shares.push(row.into_iter().map(|x| x / t).collect());
    }
    Some(aligned::evaluate(&p, &shares))
}

/// Whether `new` should replace what is installed (`current`, evaluated under
/// the same inputs; None: nothing fits, so yes): when it relieves the worst
/// uplink by [`MIN_GAIN`], or, with every uplink within its target either
/// way, when it moves [`MIN_REBALANCE`] of the hash space back towards even.
pub fn adopt(current: Option<&Evaluation>, new: &Plan) -> bool {
    let Some(c) = current else {
        return true;
    };
    let n = &new.predicted;
    if n.excess < c.excess * (1.0 - MIN_GAIN) - 1e-12 {
        return true;
    }
    c.excess <= 1e-12 && n.excess <= 1e-12 && n.imbalance < c.imbalance - MIN_REBALANCE
}

/// Each instance's group weight under per-rack shares (`ppm`, from the
/// desired state): its rack's share split evenly among the rack's instances,
/// scaled so an even share weighs `base`. A rack without a share is given an
/// even one (it gained instances since the plan); `None` when every weight
/// would be zero, so the caller keeps even weights.
pub fn weights(racks_of: &[String], ppm: &BTreeMap<String, u32>, base: u32) -> Option<Vec<u32>> {
    let n = racks_of.len();
    if n == 0 {
        return None;
    }
    let mut per_rack: BTreeMap<&str, u32> = BTreeMap::new();
    for r in racks_of {
        *per_rack.entry(r).or_default() += 1;
    }
    let share = |r: &str| -> f64 {
        match ppm.get(r) {
            Some(p) => f64::from(*p) / f64::from(PPM),
            None => f64::from(per_rack[r]) / n as f64,
        }
    };
    let w: Vec<u32> = racks_of
        .iter()
        .map(|r| {
            let x = share(r) / f64::from(per_rack[r.as_str()]) * n as f64 * f64::from(base);
            x.round() as u32
        })
        .collect();
    (w.iter().any(|x| *x > 0)).then_some(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &str = r#"
tenant: t
elements:
  clients: { type: service, vms: { c1: 10.0.0.1, c2: 10.0.0.2 } }
  web: { type: service, vms: { w1: 10.0.1.1, w2: 10.0.1.2 } }
  fw: { type: middlebox, function: monitor, instances: 2 }
  ids: { type: middlebox, function: monitor, instances: 2 }
  lb: { type: middlebox, function: monitor, instances: 2 }
chains:
  - { name: c, path: [clients, fw, ids, lb, web] }
"#;

    fn spec() -> TenantSpec {
        TenantSpec::parse(SPEC, "test", None).unwrap()
    }

    fn two_racks() -> Inputs {
        let ab = || vec!["a".to_string(), "b".to_string()];
        Inputs {
            instances: [("fw", ab()), ("ids", ab()), ("lb", ab())]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            vms: [("c1", "a"), ("c2", "a"), ("w1", "a"), ("w2", "a")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            gateway: None,
            rates: BTreeMap::new(),
            uplinks: BTreeMap::new(),
            target: HALF,
            classes: false,
        }
    }

    /// The clients in rack a, one server in a and two in b; a chain of a
    /// firewall, a NAT and two monitors, each with an instance per rack.
    const NEAR: &str = r#"
tenant: t
elements:
  clients: { type: service, vms: { c1: 10.0.0.1 } }
  web: { type: service, vms: { w1: 10.0.1.1, w2: 10.0.1.2, w3: 10.0.1.3 } }
  fw: { type: middlebox, function: monitor, instances: 2 }
  nat: { type: middlebox, function: nat, instances: 2, config: { pool: [192.0.2.1/32] } }
  ids: { type: middlebox, function: monitor, instances: 2 }
  mon: { type: middlebox, function: monitor, instances: 2 }
chains:
  - { name: c, path: [clients, fw, nat, ids, mon, web] }
"#;

    fn near() -> (TenantSpec, Inputs) {
        let ab = || vec!["a".to_string(), "b".to_string()];
        let inputs = Inputs {
            instances: ["fw", "nat", "ids", "mon"]
                .into_iter()
                .map(|k| (k.to_string(), ab()))
                .collect(),
            vms: [("c1", "a"), ("w1", "a"), ("w2", "b"), ("w3", "b")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            classes: true,
            ..Inputs::default()
        };
        (TenantSpec::parse(NEAR, "test", None).unwrap(), inputs)
    }

    #[test]
    fn flows_are_classed_by_their_servers_rack_after_the_last_nat() {
        let (spec, inputs) = near();
        assert_eq!(
            classed(&spec, &spec.chains[0], &inputs.vms),
            ["ids", "mon"],
            "after the NAT"
        );
        // Servers all in one rack: one class, nothing to split.
        let mut one = inputs.vms.clone();
        one.insert("w1".into(), "b".into());
        assert!(classed(&spec, &spec.chains[0], &one).is_empty());
        let p = plan(&spec, &inputs).unwrap().unwrap();
        let off = plan(
            &spec,
            &Inputs {
                classes: false,
                ..inputs.clone()
            },
        )
        .unwrap()
        .unwrap();
        assert!(off.classes.is_empty());
        // One split per middlebox keeps every flow in the clients' rack;
        // a split per class sends the flows to rack b's servers through rack
        // b's instances (they cross once either way) and balances them, at
        // the same worst uplink.
        for mb in ["ids", "mon"] {
            assert!(off.shares[mb][0] > 0.99, "{off:?}");
            let to_a = &p.classes[&(mb.to_string(), "a".to_string())];
            let to_b = &p.classes[&(mb.to_string(), "b".to_string())];
            assert!(to_a[0] > 0.99, "{mb}: flows to a stay in a: {to_a:?}");
            assert!(to_b[1] > 0.5, "{mb}: flows to b mostly in b: {to_b:?}");
            // Its own split, for flows no class names, is the classes' sum.
            assert!((p.shares[mb][0] - 0.5).abs() < 1e-6, "{:?}", p.shares);
        }
        assert!((p.predicted.worst - off.predicted.worst).abs() < 1e-6);
        assert!(p.predicted.imbalance < off.predicted.imbalance - 0.1);
        // The splits before the NAT are the middlebox's own, unclassed.
        assert!(!p.classes.keys().any(|(mb, _)| mb == "fw" || mb == "nat"));
        // Installed, the classes' splits evaluate as planned; without them
        // the plan no longer fits what is installed.
        let cur = evaluate_installed(&spec, &inputs, &p.ppm(), &p.class_ppm()).unwrap();
        assert!((cur.worst - p.predicted.worst).abs() < 1e-3);
        assert!(!adopt(Some(&cur), &p));
        assert_eq!(
            evaluate_installed(&spec, &inputs, &p.ppm(), &BTreeMap::new()),
            None
        );
        // Classes turned off: the classes' splits installed no longer fit.
        let no_classes = Inputs {
            classes: false,
            ..inputs.clone()
        };
        assert_eq!(
            evaluate_installed(&spec, &no_classes, &p.ppm(), &p.class_ppm()),
            None
        );
    }

    #[test]
    fn targets_parse_as_fractions_or_percentages() {
        assert_eq!(parse_target("0.5").unwrap(), 0.5);
        assert_eq!(parse_target("70%").unwrap(), 0.7);
        assert_eq!(parse_target("0").unwrap(), 0.0);
        for bad in ["1.5", "-0.1", "x", "150%", "NaN"] {
            let e = parse_target(bad).unwrap_err();
            assert!(e.contains(bad) && e.contains("from 0 to 1"), "{bad}: {e}");
        }
    }

    #[test]
    fn declared_uplinks_relieve_only_what_exceeds_the_target() {
        let s = spec();
        let mut i = two_racks();
        let a = |x: f64| [("a".to_string(), x)].into_iter().collect();
        i.rates.insert(
            0,
            ChainRates {
                forward: a(1e6),
                reverse: a(8e6),
            },
        );
        // 10 Gbit/s uplinks carry the even split's crossing (a few MB/s)
        // far below half: the shares stay even.
        i.uplinks = [("a", 1.25e9), ("b", 1.25e9)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let p = plan(&s, &i).unwrap().unwrap();
        assert!(p.even.worst < HALF, "{p:?}");
        for row in p.shares.values() {
            assert!((row[0] - 0.5).abs() < 1e-6, "balance wins: {row:?}");
        }
        // 40 Mbit/s uplinks are overloaded by the even split: rack a's
        // instances take more, as without a target.
        for c in i.uplinks.values_mut() {
            *c = 5e6;
        }
        let p = plan(&s, &i).unwrap().unwrap();
        assert!(p.even.worst > HALF, "{p:?}");
        for row in p.shares.values() {
            assert!(row[0] > 0.5 + 1e-6, "{row:?}");
        }
        // Concentrated shares installed, uplinks now 10 Gbit/s: the plan
        // brings the shares back to even, and that is adopted.
        let installed = p.ppm();
        for c in i.uplinks.values_mut() {
            *c = 1.25e9;
        }
        let back = plan(&s, &i).unwrap().unwrap();
        let cur = evaluate_installed(&s, &i, &installed, &BTreeMap::new()).unwrap();
        assert_eq!(cur.excess, 0.0, "{cur:?}");
        assert!(cur.imbalance > MIN_REBALANCE, "{cur:?}");
        assert!(adopt(Some(&cur), &back), "rebalanced: {back:?}");
        // Once even, the same plan is not adopted again.
        let cur = evaluate_installed(&s, &i, &back.ppm(), &BTreeMap::new()).unwrap();
        assert!(!adopt(Some(&cur), &back));
    }

    #[test]
    fn policies_parse_and_name_themselves() {
        for d in [Distribution::Uniform, Distribution::NetworkAware] {
            assert_eq!(d.as_str().parse::<Distribution>().unwrap(), d);
        }
        let e = "random".parse::<Distribution>().unwrap_err();
        assert!(e.to_string().contains("`random`"), "{e}");
        assert!(e.to_string().contains("network-aware"), "{e}");
    }

    #[test]
    fn uplinks_parse_into_bytes_per_second_and_bad_ones_are_named() {
        let u = parse_uplinks("r1=1000, r2=80").unwrap();
        assert_eq!(u["r1"], 125e6);
        assert_eq!(u["r2"], 10e6);
        for (bad, says) in [
            ("r1", "RACK=MBIT"),
            ("=5", "empty"),
            ("r1=-3", "positive"),
            ("r1=x", "positive"),
            ("r1=1,r1=2", "twice"),
        ] {
            let e = parse_uplinks(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn one_rack_leaves_nothing_to_choose() {
        let mut i = two_racks();
        for v in i.instances.values_mut() {
            *v = vec![NO_RACK.into(), NO_RACK.into()];
        }
        for v in i.vms.values_mut() {
            *v = NO_RACK.into();
        }
        assert_eq!(plan(&spec(), &i).unwrap(), None);
    }

    #[test]
    fn shares_follow_the_clients_rack() {
        let p = plan(&spec(), &two_racks()).unwrap().unwrap();
        assert_eq!(p.racks, ["a", "b"]);
        for (mb, row) in &p.shares {
            assert!(row[0] > 0.5 + 1e-6, "{mb}: {row:?}");
            assert!(
                row[0] <= (0.5 * (1.0 + DEFAULT_SLACK)).min(1.0) + 1e-6,
                "bounded by the slack: {row:?}"
            );
        }
        assert!(p.predicted.worst < p.even.worst, "{p:?}");
    }

    #[test]
    fn measured_rates_decide_the_ends() {
        // Every request from rack b and every reply from rack b: rack b's
        // instances take what the slack allows.
        let mut i = two_racks();
        let b = |x: f64| [("b".to_string(), x)].into_iter().collect();
        i.rates.insert(
            0,
            ChainRates {
                forward: b(1e6),
                reverse: b(8e6),
            },
        );
        let p = plan(&spec(), &i).unwrap().unwrap();
        for row in p.shares.values() {
            assert!(row[1] > 0.5 + 1e-6, "{row:?}");
        }
    }

    #[test]
    fn hysteresis_keeps_a_plan_that_is_nearly_as_good() {
        let s = spec();
        let i = two_racks();
        let p = plan(&s, &i).unwrap().unwrap();
        let installed = p.ppm();
        let cur = evaluate_installed(&s, &i, &installed, &BTreeMap::new()).unwrap();
        assert!(!adopt(Some(&cur), &p), "the same plan is not adopted again");
        // Even shares installed: the plan is a real gain.
        let even: BTreeMap<String, BTreeMap<String, u32>> = p
            .shares
            .keys()
            .map(|m| {
                (
                    m.clone(),
                    [("a".to_string(), PPM / 2), ("b".to_string(), PPM / 2)].into(),
                )
            })
            .collect();
        let cur = evaluate_installed(&s, &i, &even, &BTreeMap::new()).unwrap();
        assert!(adopt(Some(&cur), &p));
        // A share for a rack that lost its instances no longer fits (the
        // plan gives rack a its share; fw's instances are now both in b).
        assert!(installed["fw"]["a"] > 0, "{installed:?}");
        let mut i2 = i.clone();
        i2.instances
            .insert("fw".into(), vec!["b".into(), "b".into()]);
        assert_eq!(
            evaluate_installed(&s, &i2, &installed, &BTreeMap::new()),
            None
        );
        assert!(adopt(None, &p));
    }

    #[test]
    fn weights_split_a_racks_share_among_its_instances() {
        let racks: Vec<String> = ["a", "a", "b"].iter().map(|s| s.to_string()).collect();
        // Rack a owns 80%, b 20%: each a instance 40%, the b one 20%.
        let ppm = [("a".to_string(), 800_000), ("b".to_string(), 200_000)].into();
        assert_eq!(weights(&racks, &ppm, 64).unwrap(), [77, 77, 38]);
        // No share for rack b (it gained its instance since): an even one.
        let ppm = [("a".to_string(), 1_000_000)].into();
        let w = weights(&racks, &ppm, 64).unwrap();
        assert_eq!(w[2], 64, "{w:?}");
        // All zero: the caller keeps even weights.
        let ppm = [("a".to_string(), 0), ("b".to_string(), 0)].into();
        assert_eq!(weights(&racks, &ppm, 64), None);
    }
}
