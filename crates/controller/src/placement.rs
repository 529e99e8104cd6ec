//! Where new NF instances go: a pure decision over what each host declared
//! (its [`HostCapacity`]), what its placed instances take, and the port ids it
//! has left.
//!
//! Among the hosts with room for one more instance (every declared limit and a
//! free port id), the choice is, in order: the host running the fewest
//! instances of this middlebox (anti-affinity: with `required`, only hosts
//! running none qualify), the best fit (the fewest slots, then cores, then MiB
//! left afterwards: full hosts fill up and empty ones stay empty for large
//! instances; a host without a limit fits worst), the fewest NF instances, the
//! lowest id. Hosts that declared nothing are all unlimited and tie on fit, so
//! after spreading the middlebox they get the old rule: fewest instances,
//! lowest id; and nothing is refused but for want of hosts or port ids.
//!
//! An instance count that cannot be met is refused whole ([`Shortfall`]),
//! naming the middlebox, the instances wanted and what each host has left.

use serde::Serialize;
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

/// Chooses the hosts of `n` new instances of `tenant`'s `middlebox`, each taking
/// `d`, one by one (each choice sees the ones before it). `rooms` is updated
/// only when all `n` fit; otherwise nothing is chosen and the [`Shortfall`]
/// says what is missing. With no host at all the shortfall lists none.
pub fn place(
    rooms: &mut [Room],
    d: &Resources,
    anti: AntiAffinity,
    n: u32,
    tenant: &str,
    middlebox: &str,
) -> Result<Vec<u32>, Shortfall> {
    let mut trial = rooms.to_vec();
    let mut out = Vec::with_capacity(n as usize);
    for placed in 0..n {
        let best = trial
            .iter_mut()
            .filter(|r| r.admits(d, anti))
            .min_by_key(|r| r.rank(d));
        let Some(r) = best else {
            let free: Vec<String> = rooms.iter().map(|r| r.describe(d, anti)).collect();
            return Err(Shortfall {
                tenant: tenant.to_string(),
                middlebox: middlebox.to_string(),
                wanted: n,
                placed,
                demand: demand(d),
                free: if free.is_empty() {
                    "no host registered".to_string()
                } else {
                    free.join("; ")
                },
                anti_affinity: anti.as_str(),
            });
        };
        r.take(d);
        out.push(r.id);
    }
    rooms.clone_from_slice(&trial);
    Ok(out)
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
}
