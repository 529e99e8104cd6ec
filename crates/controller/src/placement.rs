//! Where new NF instances go: a pure decision over what each host declared
//! (its [`HostCapacity`]), what its placed instances take, and the port ids it
//! has left, under a placement [`Policy`].
//!
//! Every policy chooses among the hosts with room for one more instance (every
//! declared limit and a free port id; with `required` anti-affinity, only hosts
//! running none of the middlebox's instances). `least-loaded` ([`place`]) then
//! takes, in order: the host running the fewest instances of this middlebox
//! (preferred anti-affinity), the best fit (the fewest slots, then cores, then
//! MiB left afterwards: full hosts fill up and empty ones stay empty for large
//! instances; a host without a limit fits worst), the fewest NF instances, the
//! lowest id. Hosts that declared nothing are all unlimited and tie on fit, so
//! after spreading the middlebox they get the old rule: fewest instances,
//! lowest id; and nothing is refused but for want of hosts or port ids.
//!
//! `rack-aware` first picks a rack with Stratos's rule
//! ([`sluice_optimizer::stratos::rack_for_instance`]: where the middlebox's
//! chains' VMs are, in proportion to them, else the least-loaded rack), then
//! the host in it as `least-loaded` does. Hosts without a rack form one
//! domain, so with no rack declared it is `least-loaded`. `tenant-centric` and
//! `service-centric` are NFaaS's best fit
//! ([`sluice_optimizer::nfaas::best_fit_among`]) among the hosts running the
//! fewest of the middlebox's instances, preferring those already running the
//! tenant's instances, or instances of the same function.
//!
//! An instance count that cannot be met is refused whole ([`Shortfall`]),
//! naming the middlebox, the instances wanted and what each host has left.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sluice_optimizer::nfaas::{self, best_fit_among};
use sluice_optimizer::stratos::{rack_for_instance, RackDemand};
use sluice_proto::HostCapacity;
use sluice_tenant::{AntiAffinity, Resources};

/// One host as placement sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Room {
    /// Host id.
    pub id: u32,
    /// Host name (for messages).
    pub name: String,
    /// What it declared (no limit where `None`).
    pub capacity: HostCapacity,
    /// What its placed instances take.
    pub used: Resources,
    /// NF instances placed on it (any tenant).
    pub instances: u32,
    /// Instances of the middlebox being placed.
    pub mine: u32,
    /// Port ids it has left.
    pub free_ports: u32,
    /// Rack it declared (`None`: no locality known).
    pub rack: Option<String>,
    /// NF instances of the tenant being placed on it (any middlebox).
    pub tenant_instances: u32,
    /// NF instances of the same function (any tenant) on it.
    pub same_function: u32,
}

/// Free amount of one resource: `None` for no limit.
fn left(limit: Option<u64>, used: u64) -> Option<u64> {
    limit.map(|l| l.saturating_sub(used))
}

impl Room {
    /// Slots left (`None`: no limit).
    pub fn free_slots(&self) -> Option<u64> {
        left(
            self.capacity.instance_slots.map(u64::from),
            u64::from(self.used.slots),
        )
    }

    fn free_cores(&self) -> Option<u64> {
        left(
            self.capacity.cores.map(u64::from),
            u64::from(self.used.cores),
        )
    }

    fn free_memory(&self) -> Option<u64> {
        left(self.capacity.memory_mib, self.used.memory_mib)
    }

    /// Whether one more instance taking `d` fits, anti-affinity aside.
    fn fits(&self, d: &Resources) -> bool {
        let ok = |free: Option<u64>, need: u64| free.is_none_or(|f| f >= need);
        self.free_ports > 0
            && ok(self.free_slots(), u64::from(d.slots))
            && ok(self.free_cores(), u64::from(d.cores))
            && ok(self.free_memory(), d.memory_mib)
    }

    /// Whether it may take one more instance of the middlebox.
    fn admits(&self, d: &Resources, anti: AntiAffinity) -> bool {
        self.fits(d) && !(anti == AntiAffinity::Required && self.mine > 0)
    }

    /// The order of preference (smallest first) for one more instance taking `d`.
    fn rank(&self, d: &Resources) -> (u32, [u64; 3], u32, u32) {
        let after = |free: Option<u64>, need: u64| free.map_or(u64::MAX, |f| f - need);
        (
            self.mine,
            [
                after(self.free_slots(), u64::from(d.slots)),
                after(self.free_cores(), u64::from(d.cores)),
                after(self.free_memory(), d.memory_mib),
            ],
            self.instances,
            self.id,
        )
    }

    fn take(&mut self, d: &Resources) {
        self.used.slots = self.used.slots.saturating_add(d.slots);
        self.used.cores = self.used.cores.saturating_add(d.cores);
        self.used.memory_mib = self.used.memory_mib.saturating_add(d.memory_mib);
        self.instances += 1;
        self.mine += 1;
        self.tenant_instances += 1;
        self.same_function += 1;
        self.free_ports -= 1;
    }

    /// What is left of it for an instance taking `d`, as a message shows it:
    /// `h2 1 slot`, `h1 0 slots, 512 MiB`, `h3 unlimited`.
    fn describe(&self, d: &Resources, anti: AntiAffinity) -> String {
        let mut parts = Vec::new();
        match self.free_slots() {
            Some(n) => parts.push(format!("{n} slot{}", if n == 1 { "" } else { "s" })),
            None => parts.push("unlimited slots".to_string()),
        }
        if d.cores > 0 {
            if let Some(n) = self.free_cores() {
                parts.push(format!("{n} cores"));
            }
        }
        if d.memory_mib > 0 {
            if let Some(n) = self.free_memory() {
                parts.push(format!("{n} MiB"));
            }
        }
        if self.free_ports == 0 {
            parts.push("no port id".to_string());
        }
        let mut s = format!("{} {}", self.name, parts.join(", "));
        if anti == AntiAffinity::Required && self.mine > 0 {
            s.push_str(" (runs one already)");
        }
        s
    }
}

/// An instance count that fits on no combination of hosts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Shortfall {
    /// Tenant.
    pub tenant: String,
    /// Middlebox.
    pub middlebox: String,
    /// New instances asked for.
    pub wanted: u32,
    /// How many of them would have fit.
    pub placed: u32,
    /// What one instance takes (`1 slot`, `2 slots, 512 MiB`).
    pub demand: String,
    /// What each host had left before any of them was placed.
    pub free: String,
    /// `preferred` or `required`.
    pub anti_affinity: &'static str,
}

impl std::fmt::Display for Shortfall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "middlebox `{}` of tenant `{}` needs {} new instance{} of {}, and only {} fit{}; free: {} (anti-affinity: {})",
            self.middlebox,
            self.tenant,
            self.wanted,
            if self.wanted == 1 { "" } else { "s" },
            self.demand,
            self.placed,
            if self.placed == 1 { "s" } else { "" },
            self.free,
            self.anti_affinity
        )
    }
}

impl std::error::Error for Shortfall {}

/// `1 slot`, `2 slots, 1 core, 512 MiB`.
fn demand(d: &Resources) -> String {
    let mut s = format!("{} slot{}", d.slots, if d.slots == 1 { "" } else { "s" });
    if d.cores > 0 {
        s.push_str(&format!(
            ", {} core{}",
            d.cores,
            if d.cores == 1 { "" } else { "s" }
        ));
    }
    if d.memory_mib > 0 {
        s.push_str(&format!(", {} MiB", d.memory_mib));
    }
    s
}

/// How new NF instances choose among the hosts with room (the controller's
/// `placement` setting).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Fewest of the middlebox's instances, best fit, fewest NF instances.
    LeastLoaded,
    /// Stratos: in the racks of the middlebox's chains' VMs, then as
    /// `least-loaded` within the rack.
    #[default]
    RackAware,
    /// NFaaS: best fit, preferring hosts that run the tenant's instances.
    TenantCentric,
    /// NFaaS: best fit, preferring hosts that run instances of the same
    /// function.
    ServiceCentric,
}

impl Policy {
    /// Every policy, as the setting spells them.
    pub const ALL: [Policy; 4] = [
        Policy::LeastLoaded,
        Policy::RackAware,
        Policy::TenantCentric,
        Policy::ServiceCentric,
    ];

    /// The setting's spelling (`rack-aware`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::LeastLoaded => "least-loaded",
            Policy::RackAware => "rack-aware",
            Policy::TenantCentric => "tenant-centric",
            Policy::ServiceCentric => "service-centric",
        }
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A policy name that is none of [`Policy::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown placement policy `{0}`: use least-loaded, rack-aware, tenant-centric or service-centric")]
pub struct UnknownPolicy(pub String);

impl std::str::FromStr for Policy {
    type Err = UnknownPolicy;

    fn from_str(s: &str) -> Result<Policy, UnknownPolicy> {
        Policy::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| UnknownPolicy(s.to_string()))
    }
}

/// What is to be placed: `n` new instances of `tenant`'s `middlebox`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask<'a> {
    /// Tenant.
    pub tenant: &'a str,
    /// Middlebox.
    pub middlebox: &'a str,
    /// What each instance takes.
    pub demand: Resources,
    /// Its anti-affinity.
    pub anti: AntiAffinity,
    /// New instances wanted.
    pub n: u32,
    /// The policy deciding among hosts with room.
    pub policy: Policy,
    /// The middlebox's chains' VM endpoints (sources and sinks) by host id,
    /// for `rack-aware`.
    pub endpoints: &'a BTreeMap<u32, u32>,
}

/// Where one new instance goes, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// Host id.
    pub host: u32,
    /// The policy that chose it.
    pub policy: Policy,
    /// Why it was chosen, in words.
    pub reason: String,
}

/// Chooses the hosts of `n` new instances of `tenant`'s `middlebox`, each taking
/// `d`, one by one, by the `least-loaded` rule (see [`decide`]).
pub fn place(
    rooms: &mut [Room],
    d: &Resources,
    anti: AntiAffinity,
    n: u32,
    tenant: &str,
    middlebox: &str,
) -> Result<Vec<u32>, Shortfall> {
    let none = BTreeMap::new();
    let ask = Ask {
        tenant,
        middlebox,
        demand: *d,
        anti,
        n,
        policy: Policy::LeastLoaded,
        endpoints: &none,
    };
    Ok(decide(rooms, &ask)?.into_iter().map(|p| p.host).collect())
}

/// Chooses the hosts of the asked instances, one by one (each choice sees the
/// ones before it), under the ask's policy. `rooms` is updated only when all
/// fit; otherwise nothing is chosen and the [`Shortfall`] says what is
/// missing. With no host at all the shortfall lists none.
pub fn decide(rooms: &mut [Room], ask: &Ask<'_>) -> Result<Vec<Placed>, Shortfall> {
    let d = &ask.demand;
    let mut trial = rooms.to_vec();
    let mut out = Vec::with_capacity(ask.n as usize);
    for placed in 0..ask.n {
        let Some((i, reason)) = choose(&trial, ask) else {
            let free: Vec<String> = rooms.iter().map(|r| r.describe(d, ask.anti)).collect();
            return Err(Shortfall {
                tenant: ask.tenant.to_string(),
                middlebox: ask.middlebox.to_string(),
                wanted: ask.n,
                placed,
                demand: demand(d),
                free: if free.is_empty() {
                    "no host registered".to_string()
                } else {
                    free.join("; ")
                },
                anti_affinity: ask.anti.as_str(),
            });
        };
        trial[i].take(d);
        out.push(Placed {
            host: trial[i].id,
            policy: ask.policy,
            reason,
        });
    }
    rooms.clone_from_slice(&trial);
    Ok(out)
}

/// The index of the best of `among` (indices of `rooms`) by the
/// `least-loaded` rank.
fn least_loaded(
    rooms: &[Room],
    among: impl Iterator<Item = usize>,
    d: &Resources,
) -> Option<usize> {
    among.min_by_key(|&i| rooms[i].rank(d))
}

/// `host h2 (0 of its instances, 3 slots left)`: the host part of a reason.
fn host_words(r: &Room, d: &Resources) -> String {
    let left = |free: Option<u64>, need: u64| free.map(|f| f - need);
    let mut s = format!(
        "host {} ({} of its instances, {} NF instances",
        r.name, r.mine, r.instances
    );
    if let Some(n) = left(r.free_slots(), u64::from(d.slots)) {
        s.push_str(&format!(", {n} slot{} left", if n == 1 { "" } else { "s" }));
    }
    s.push(')');
    s
}

/// One instance's host under the ask's policy, as an index of `rooms`, with
/// the reason; `None`: no host admits it.
fn choose(rooms: &[Room], ask: &Ask<'_>) -> Option<(usize, String)> {
    let d = &ask.demand;
    let admitting: Vec<usize> = (0..rooms.len())
        .filter(|&i| rooms[i].admits(d, ask.anti))
        .collect();
    if admitting.is_empty() {
        return None;
    }
    match ask.policy {
        Policy::LeastLoaded => {
            let i = least_loaded(rooms, admitting.into_iter(), d)?;
            let why = format!(
                "fewest of its instances, best fit, fewest NF instances: {}",
                host_words(&rooms[i], d)
            );
            Some((i, why))
        }
        Policy::RackAware => rack_aware(rooms, &admitting, ask),
        Policy::TenantCentric | Policy::ServiceCentric => best_fit(rooms, &admitting, ask),
    }
}

/// The rack's name as reasons show it.
fn rack_name(rack: &Option<String>) -> String {
    match rack {
        Some(r) => format!("rack {r}"),
        None => "the hosts without a rack".to_string(),
    }
}

/// Stratos's rack, then the least-loaded host in it.
fn rack_aware(rooms: &[Room], admitting: &[usize], ask: &Ask<'_>) -> Option<(usize, String)> {
    let d = &ask.demand;
    // Racks in name order (hosts without one first), so indices are stable.
    let mut racks: BTreeMap<&Option<String>, (RackDemand, u32)> = BTreeMap::new();
    for (i, r) in rooms.iter().enumerate() {
        let (rd, hosts) = racks.entry(&r.rack).or_insert((
            RackDemand {
                endpoints: 0,
                instances: 0,
                room: false,
                load: 0.0,
            },
            0,
        ));
        rd.endpoints += ask.endpoints.get(&r.id).copied().unwrap_or(0);
        rd.instances += r.mine;
        rd.room |= admitting.contains(&i);
        // Instances per host, summed here and divided below.
        rd.load += f64::from(r.instances);
        *hosts += 1;
    }
    let names: Vec<&Option<String>> = racks.keys().copied().collect();
    let demands: Vec<RackDemand> = racks
        .values()
        .map(|(rd, hosts)| RackDemand {
            load: rd.load / f64::from(*hosts),
            ..*rd
        })
        .collect();
    let c = rack_for_instance(&demands)?;
    let rack = names[c.rack];
    let i = least_loaded(
        rooms,
        admitting
            .iter()
            .copied()
            .filter(|&i| &rooms[i].rack == rack),
        d,
    )?;
    let total: u32 = demands.iter().map(|r| r.endpoints).sum();
    let mut why = String::new();
    for &f in &c.full {
        why.push_str(&format!(
            "{} ({} of the chains' {total} VM endpoints) has no room; ",
            rack_name(names[f]),
            demands[f].endpoints
        ));
    }
    let chosen = &demands[c.rack];
    if c.local {
        why.push_str(&format!(
            "{} holds {} of the chains' {total} VM endpoints and ran {} of its instances",
            rack_name(rack),
            chosen.endpoints,
            chosen.instances
        ));
    } else if total == 0 {
        why.push_str(&format!(
            "no VM endpoint of its chains is registered; least-loaded: {}",
            rack_name(rack)
        ));
    } else {
        why.push_str(&format!(
            "no rack with room holds a VM endpoint of its chains; least-loaded: {}",
            rack_name(rack)
        ));
    }
    why.push_str(&format!("; {}", host_words(&rooms[i], d)));
    Some((i, why))
}

/// NFaaS's best fit among the hosts running the fewest of the middlebox's
/// instances, those sharing the tenant (or the function) first.
fn best_fit(rooms: &[Room], admitting: &[usize], ask: &Ask<'_>) -> Option<(usize, String)> {
    let d = &ask.demand;
    let fewest = admitting.iter().map(|&i| rooms[i].mine).min()?;
    // Equal best fits fall to the least-loaded order.
    let mut cands: Vec<usize> = admitting
        .iter()
        .copied()
        .filter(|&i| rooms[i].mine == fewest)
        .collect();
    cands.sort_by_key(|&i| rooms[i].rank(d));
    let (shared, what): (fn(&Room) -> u32, &str) = match ask.policy {
        Policy::TenantCentric => (|r| r.tenant_instances, "the tenant's NF instances"),
        _ => (|r| r.same_function, "instances of the same function"),
    };
    // No limit declared: as much as anything can need.
    let free = |r: &Room| nfaas::Resources {
        cpu: r.free_cores().map_or(f64::INFINITY, |c| c as f64),
        mem: r.free_memory().map_or(f64::INFINITY, |m| m as f64),
    };
    let need = nfaas::Resources {
        cpu: f64::from(d.cores),
        mem: d.memory_mib as f64,
    };
    let pick = |only_shared: bool| {
        best_fit_among(
            cands
                .iter()
                .filter(|&&i| !only_shared || shared(&rooms[i]) > 0)
                .map(|&i| (i, free(&rooms[i]))),
            need,
        )
    };
    if let Some(i) = pick(true) {
        let why = format!(
            "best fit among hosts already running {what} ({} here): {}",
            shared(&rooms[i]),
            host_words(&rooms[i], d)
        );
        return Some((i, why));
    }
    let i = pick(false)?;
    let why = format!(
        "no host running {what} has room; best fit: {}",
        host_words(&rooms[i], d)
    );
    Some((i, why))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn room(id: u32, slots: Option<u32>, used: u32, mine: u32) -> Room {
        Room {
            id,
            name: format!("h{id}"),
            capacity: HostCapacity {
                instance_slots: slots,
                ..HostCapacity::default()
            },
            used: Resources {
                slots: used,
                cores: 0,
                memory_mib: 0,
            },
            instances: used,
            mine,
            free_ports: 100,
            rack: None,
            tenant_instances: 0,
            same_function: 0,
        }
    }

    const ONE: Resources = Resources {
        slots: 1,
        cores: 0,
        memory_mib: 0,
    };

    fn go(
        rooms: &mut [Room],
        d: &Resources,
        anti: AntiAffinity,
        n: u32,
    ) -> Result<Vec<u32>, Shortfall> {
        place(rooms, d, anti, n, "acme", "mon")
    }

    #[test]
    fn unlimited_hosts_get_the_old_rule_fewest_instances_then_lowest_id() {
        let mut rooms = vec![
            room(1, None, 3, 0),
            room(2, None, 1, 0),
            room(3, None, 1, 0),
        ];
        let got = go(&mut rooms, &ONE, AntiAffinity::Preferred, 1).unwrap();
        assert_eq!(got, vec![2], "fewest instances, then the lowest id");
        // Soft anti-affinity first spreads the middlebox, then load decides.
        let got = go(&mut rooms, &ONE, AntiAffinity::Preferred, 3).unwrap();
        assert_eq!(got, vec![3, 1, 2]);
        assert_eq!(rooms[0].instances, 4);
        assert_eq!(rooms[1].mine, 2);
    }

    #[test]
    fn best_fit_fills_the_fullest_host_that_has_room() {
        // Another middlebox's instances: anti-affinity does not tell them apart.
        let mut rooms = vec![
            room(1, Some(8), 2, 0),
            room(2, Some(8), 6, 0),
            room(3, Some(8), 7, 0),
        ];
        let d = Resources { slots: 2, ..ONE };
        let got = go(&mut rooms, &d, AntiAffinity::Preferred, 1).unwrap();
        assert_eq!(got, vec![2], "h3 has 1 slot, h2 is the tightest fit");
        assert_eq!(rooms[1].free_slots(), Some(0));
        // An unlimited host fits worst: limited hosts fill first.
        let mut rooms = vec![room(1, None, 0, 0), room(2, Some(4), 1, 0)];
        assert_eq!(
            go(&mut rooms, &ONE, AntiAffinity::Preferred, 1).unwrap(),
            vec![2]
        );
    }

    #[test]
    fn soft_anti_affinity_shares_a_host_only_when_no_other_has_room() {
        let mut rooms = vec![room(1, Some(4), 0, 0), room(2, Some(4), 3, 0)];
        // Best fit alone would put both on h2 (1 slot left, then 0).
        let got = go(&mut rooms, &ONE, AntiAffinity::Preferred, 2).unwrap();
        assert_eq!(got, vec![2, 1], "the second goes to the host without one");
        // A third must share: h2 is full, so h1.
        let got = go(&mut rooms, &ONE, AntiAffinity::Preferred, 1).unwrap();
        assert_eq!(got, vec![1]);
        assert_eq!(rooms[0].mine, 2);
    }

    #[test]
    fn hard_anti_affinity_refuses_rather_than_share() {
        let mut rooms = vec![room(1, Some(4), 1, 1), room(2, Some(4), 3, 0)];
        let before = rooms.clone();
        let e = go(&mut rooms, &ONE, AntiAffinity::Required, 2).unwrap_err();
        assert_eq!(rooms, before, "nothing is taken from the hosts");
        assert_eq!((e.wanted, e.placed), (2, 1));
        let m = e.to_string();
        for part in [
            "middlebox `mon` of tenant `acme`",
            "needs 2 new instances of 1 slot",
            "only 1 fits",
            "h1 3 slots (runs one already)",
            "h2 1 slot",
            "anti-affinity: required",
        ] {
            assert!(m.contains(part), "{part:?} not in {m}");
        }
        assert_eq!(
            go(&mut rooms, &ONE, AntiAffinity::Required, 1).unwrap(),
            vec![2]
        );
    }

    #[test]
    fn exhausted_capacity_names_every_dimension_missing() {
        let mut rooms = vec![room(1, Some(2), 2, 0), room(2, Some(4), 1, 0)];
        rooms[1].capacity.memory_mib = Some(1024);
        rooms[1].used.memory_mib = 768;
        let d = Resources {
            slots: 1,
            cores: 0,
            memory_mib: 512,
        };
        let e = go(&mut rooms, &d, AntiAffinity::Preferred, 3).unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("needs 3 new instances of 1 slot, 512 MiB"),
            "{m}"
        );
        assert!(m.contains("only 0 fit;"), "{m}");
        assert!(m.contains("h1 0 slots; h2 3 slots, 256 MiB"), "{m}");
        // Port ids run out like any other capacity.
        let mut rooms = vec![room(1, None, 0, 0)];
        rooms[0].free_ports = 1;
        let e = go(&mut rooms, &ONE, AntiAffinity::Preferred, 2).unwrap_err();
        assert_eq!(e.placed, 1);
        assert!(e.to_string().contains("h1 unlimited slots"), "{e}");
        rooms[0].free_ports = 0;
        assert!(go(&mut rooms, &ONE, AntiAffinity::Preferred, 1)
            .unwrap_err()
            .to_string()
            .contains("no port id"));
        // No host at all.
        let e = go(&mut [], &ONE, AntiAffinity::Preferred, 1).unwrap_err();
        assert!(e.to_string().contains("free: no host registered"), "{e}");
    }

    fn racked(id: u32, rack: &str, slots: u32) -> Room {
        Room {
            rack: Some(rack.to_string()),
            ..room(id, Some(slots), 0, 0)
        }
    }

    fn ask<'a>(policy: Policy, n: u32, endpoints: &'a BTreeMap<u32, u32>) -> Ask<'a> {
        Ask {
            tenant: "acme",
            middlebox: "mon",
            demand: ONE,
            anti: AntiAffinity::Preferred,
            n,
            policy,
            endpoints,
        }
    }

    #[test]
    fn rack_aware_puts_instances_in_the_rack_of_the_vms() {
        // Hosts 1-2 in rack a, 3-4 in rack b; the chain's VMs all on host 4.
        let mut rooms = vec![
            racked(1, "a", 4),
            racked(2, "a", 4),
            racked(3, "b", 4),
            racked(4, "b", 4),
        ];
        let vms = BTreeMap::from([(4, 2)]);
        let got = decide(&mut rooms, &ask(Policy::RackAware, 2, &vms)).unwrap();
        let hosts: Vec<u32> = got.iter().map(|p| p.host).collect();
        assert_eq!(hosts, vec![3, 4], "both in rack b, one per host");
        assert!(got.iter().all(|p| p.policy == Policy::RackAware));
        assert!(
            got[0]
                .reason
                .starts_with("rack b holds 2 of the chains' 2 VM endpoints"),
            "{}",
            got[0].reason
        );
        // Least-loaded knows no racks: the first goes to rack a.
        let mut rooms = vec![
            racked(1, "a", 4),
            racked(2, "a", 4),
            racked(3, "b", 4),
            racked(4, "b", 4),
        ];
        let got = decide(&mut rooms, &ask(Policy::LeastLoaded, 1, &vms)).unwrap();
        assert_eq!(got[0].host, 1);
    }

    #[test]
    fn rack_aware_spills_from_a_full_rack_and_says_so() {
        let mut rooms = vec![racked(1, "a", 1), racked(2, "b", 4), racked(3, "c", 4)];
        // VMs: 3 in rack a, 1 in rack c.
        let vms = BTreeMap::from([(1, 3), (3, 1)]);
        let got = decide(&mut rooms, &ask(Policy::RackAware, 3, &vms)).unwrap();
        let hosts: Vec<u32> = got.iter().map(|p| p.host).collect();
        // a takes one (its only slot), then c (the other VM's rack) twice.
        assert_eq!(hosts, vec![1, 3, 3]);
        let r = &got[1].reason;
        assert!(
            r.contains("rack a (3 of the chains' 4 VM endpoints) has no room")
                && r.contains("rack c holds 1 of"),
            "{r}"
        );
        // No VM endpoint: the least-loaded rack.
        let none = BTreeMap::new();
        let mut rooms = vec![racked(1, "a", 4), racked(2, "b", 4)];
        rooms[0].instances = 3;
        let got = decide(&mut rooms, &ask(Policy::RackAware, 1, &none)).unwrap();
        assert_eq!(got[0].host, 2);
        assert!(
            got[0].reason.contains("least-loaded: rack b"),
            "{}",
            got[0].reason
        );
    }

    #[test]
    fn rack_aware_keeps_anti_affinity_across_the_hosts_of_a_rack() {
        let vms = BTreeMap::from([(1, 1)]);
        let mut rooms = vec![racked(1, "a", 4), racked(2, "a", 4), racked(3, "b", 4)];
        // Preferred: spread over rack a's two hosts, then share one.
        let got = decide(&mut rooms, &ask(Policy::RackAware, 3, &vms)).unwrap();
        let hosts: Vec<u32> = got.iter().map(|p| p.host).collect();
        assert_eq!(hosts, vec![1, 2, 1]);
        // Required: a third instance leaves the rack rather than share a host.
        let mut rooms = vec![racked(1, "a", 4), racked(2, "a", 4), racked(3, "b", 4)];
        let a = Ask {
            anti: AntiAffinity::Required,
            ..ask(Policy::RackAware, 3, &vms)
        };
        let got = decide(&mut rooms, &a).unwrap();
        let hosts: Vec<u32> = got.iter().map(|p| p.host).collect();
        assert_eq!(hosts, vec![1, 2, 3]);
        assert!(got[2].reason.contains("rack a"), "{}", got[2].reason);
        // And refuses, with nothing taken, when no host is left.
        let before = rooms.clone();
        let e = decide(&mut rooms, &Ask { n: 1, ..a }).unwrap_err();
        assert_eq!(rooms, before);
        assert_eq!(e.placed, 0);
    }

    #[test]
    fn rack_aware_without_racks_is_least_loaded() {
        let mut a = vec![
            room(1, Some(8), 2, 0),
            room(2, Some(8), 6, 0),
            room(3, None, 1, 0),
        ];
        let mut b = a.clone();
        let vms = BTreeMap::from([(3, 5)]);
        let ra = decide(&mut a, &ask(Policy::RackAware, 4, &vms)).unwrap();
        let ll = decide(&mut b, &ask(Policy::LeastLoaded, 4, &vms)).unwrap();
        let hosts = |v: &[Placed]| v.iter().map(|p| p.host).collect::<Vec<_>>();
        assert_eq!(hosts(&ra), hosts(&ll));
        assert_eq!(a, b);
    }

    #[test]
    fn tenant_centric_joins_the_tenants_host_and_service_centric_its_function() {
        let none = BTreeMap::new();
        let fresh = || {
            let mut rooms = vec![
                room(1, Some(8), 1, 0),
                room(2, Some(8), 4, 0),
                room(3, Some(8), 2, 0),
            ];
            // Host 3 runs one of the tenant's instances, host 1 one of the
            // same function (another tenant's).
            rooms[2].tenant_instances = 1;
            rooms[0].same_function = 1;
            rooms
        };
        let mut rooms = fresh();
        let got = decide(&mut rooms, &ask(Policy::TenantCentric, 1, &none)).unwrap();
        assert_eq!(got[0].host, 3, "{got:?}");
        assert!(
            got[0].reason.contains("the tenant's NF instances (1 here)"),
            "{}",
            got[0].reason
        );
        let mut rooms = fresh();
        let got = decide(&mut rooms, &ask(Policy::ServiceCentric, 1, &none)).unwrap();
        assert_eq!(got[0].host, 1, "{got:?}");
        // Least-loaded would take the best fit, host 2.
        let mut rooms = fresh();
        assert_eq!(
            decide(&mut rooms, &ask(Policy::LeastLoaded, 1, &none)).unwrap()[0].host,
            2
        );
        // The tenant's host full: best fit among the others, said so.
        let mut rooms = fresh();
        rooms[2].used.slots = 8;
        let got = decide(&mut rooms, &ask(Policy::TenantCentric, 1, &none)).unwrap();
        assert_eq!(got[0].host, 2);
        assert!(
            got[0].reason.starts_with("no host running the tenant's"),
            "{}",
            got[0].reason
        );
    }

    #[test]
    fn nfaas_best_fit_takes_the_host_with_the_fewest_cores_left() {
        let none = BTreeMap::new();
        let mut rooms = vec![
            room(1, None, 0, 0),
            room(2, None, 0, 0),
            room(3, None, 0, 0),
        ];
        for (r, cores) in rooms.iter_mut().zip([8, 2, 4]) {
            r.capacity.cores = Some(cores);
            r.tenant_instances = 1;
        }
        let a = Ask {
            demand: Resources { cores: 2, ..ONE },
            ..ask(Policy::TenantCentric, 3, &none)
        };
        let got = decide(&mut rooms, &a).unwrap();
        let hosts: Vec<u32> = got.iter().map(|p| p.host).collect();
        // 2 cores: h2 (2 left) then, spreading, h3 (4) then h1 (8).
        assert_eq!(hosts, vec![2, 3, 1]);
    }

    #[test]
    fn policies_parse_from_their_names() {
        for p in Policy::ALL {
            assert_eq!(p.as_str().parse::<Policy>(), Ok(p));
        }
        let e = "random".parse::<Policy>().unwrap_err().to_string();
        assert!(e.contains("`random`") && e.contains("rack-aware"), "{e}");
        assert_eq!(Policy::default(), Policy::RackAware);
    }
}
