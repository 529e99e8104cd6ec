//! Configuration deltas: what changed between two versions of a host's
//! [`AgentConfig`], so the controller sends an agent only that
//! (`PATCH {api}/v1/config`, issue 25) instead of its whole configuration.
//!
//! A [`ConfigDelta`] names the version it applies to (`base_version`) and the
//! version it makes. Each list of the configuration is keyed (peers by host
//! id, ports by port id, tenants by tenant name, instances by name, group
//! policies by `(vni, group)`, health checks by `(tenant, middlebox, backend,
//! port)`, fabric keys by peer host) and carries a [`ListDelta`]: the keys
//! removed, the entries changed (replaced whole, in place), the entries added
//! with their position, and the whole key order only when surviving entries
//! changed places. The small unkeyed fields (`pardons`) are replaced whole when
//! they changed. Applying keeps the new configuration's list order exactly:
//! `old.apply_delta(&AgentConfig::delta_from(&old, &new)) == new` for every
//! pair with `new.version > old.version` and the same host (the agent and the
//! controller's compiler rely on nothing but that equality).
//!
//! Both functions are pure; [`AgentConfig::apply_delta`] checks everything
//! (host, base version, each removal and change naming an entry that is
//! there, each addition one that is not) and changes nothing on error.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;

use serde::{Deserialize, Serialize};

use crate::{
    AgentConfig, FabricAuth, GroupPolicy, HealthCheck, InstanceConfig, Pardon, Peer, PeerKeys,
    PortConfig, TenantFib,
};

/// The changes from one version of a host's configuration to the next
/// (`PATCH /v1/config`). Absent fields: unchanged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigDelta {
    /// The host the configuration is for.
    pub host: u32,
    /// The version this delta applies to: the agent must run exactly this one
    /// (else it answers 409 and the controller sends the whole configuration).
    pub base_version: u64,
    /// The version the result has (greater than `base_version`).
    pub version: u64,
    /// Peers, by host id.
    #[serde(default, skip_serializing_if = "ListDelta::is_empty")]
    pub peers: ListDelta<Peer, u32>,
    /// Switch ports, by port id.
    #[serde(default, skip_serializing_if = "ListDelta::is_empty")]
    pub ports: ListDelta<PortConfig, u16>,
    /// Tenants' FIBs, by tenant name (a tenant whose FIB changed is sent whole).
    #[serde(default, skip_serializing_if = "ListDelta::is_empty")]
    pub tenants: ListDelta<TenantFib, String>,
    /// NF instances, by instance name.
    #[serde(default, skip_serializing_if = "ListDelta::is_empty")]
    pub instances: ListDelta<InstanceConfig, String>,
    /// Group policies, by `[vni, group]`.
    #[serde(default, skip_serializing_if = "ListDelta::is_empty")]
    pub group_policies: ListDelta<GroupPolicy, (u32, u32)>,
    /// Fabric authentication (absent: unchanged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric_auth: Option<FabricAuthDelta>,
    /// The whole new list of pardons (absent: unchanged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pardons: Option<Vec<Pardon>>,
    /// Health checks, by `[tenant, middlebox, backend, port]`.
    #[serde(default, skip_serializing_if = "ListDelta::is_empty")]
    pub health_checks: ListDelta<HealthCheck, (String, String, String, u16)>,
}

/// How [`AgentConfig::fabric_auth`] changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FabricAuthDelta {
    /// Fabric authentication is turned off (the field is absent).
    Off,
    /// Turned on with these keys (there were none).
    Set(FabricAuth),
    /// The per-peer keys changed, by peer host id.
    Peers(ListDelta<PeerKeys, u32>),
}

/// An entry added to a list, at its index in the new list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Added<T> {
    /// Index in the new list (additions are listed by increasing index).
    pub at: usize,
    /// The entry.
    pub entry: T,
}

/// The changes to one keyed list of a configuration ([`ConfigDelta`]).
///
/// Applied in this order: `replace` (if present, alone), else drop the
/// entries `remove` names, replace the entries `change` carries in place,
/// insert `add`'s entries at their indices (increasing), and finally put the
/// entries in `order` if present (the new key order, sent only when entries
/// that stay changed places).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(bound(
    serialize = "T: Serialize, K: Serialize",
    deserialize = "T: Deserialize<'de>, K: Deserialize<'de>"
))]
pub struct ListDelta<T, K> {
    /// The whole new list (sent when an old or new list repeats a key, which
    /// no key can then name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace: Option<Vec<T>>,
    /// Keys of the entries removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<K>,
    /// Entries whose content changed, each replacing the entry of its key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub change: Vec<T>,
    /// New entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub add: Vec<Added<T>>,
    /// The new list's keys in order, when entries that stay moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<Vec<K>>,
}

impl<T, K> Default for ListDelta<T, K> {
    fn default() -> ListDelta<T, K> {
        ListDelta {
            replace: None,
            remove: Vec::new(),
            change: Vec::new(),
            add: Vec::new(),
            order: None,
        }
    }
}

impl<T, K> ListDelta<T, K> {
    /// Whether the list is unchanged.
    pub fn is_empty(&self) -> bool {
        self.replace.is_none()
            && self.remove.is_empty()
            && self.change.is_empty()
            && self.add.is_empty()
            && self.order.is_none()
    }
}

/// Why a delta cannot be applied (nothing changed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeltaError {
    /// The delta is for another host.
    Host {
        /// The configuration's host.
        config: u32,
        /// The delta's.
        delta: u32,
    },
    /// The delta applies to another version than the one running (the
    /// agent's answer: 409, and the controller sends the whole configuration).
    Base {
        /// The version running.
        running: u64,
        /// The delta's base version.
        base: u64,
    },
    /// The delta's version is not past its base.
    Version {
        /// Its base version.
        base: u64,
        /// Its version.
        version: u64,
    },
    /// Something is wrong with one list's changes.
    List {
        /// Which list (`peers`, `fabric_auth.peers`, ...).
        list: &'static str,
        /// What.
        problem: String,
    },
}

impl std::fmt::Display for DeltaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeltaError::Host { config, delta } => write!(
                f,
                "the delta is for host {delta}, this configuration for host {config}"
            ),
            DeltaError::Base { running, base } => write!(
                f,
                "the delta applies to version {base}, but version {running} runs here: send the whole configuration"
            ),
            DeltaError::Version { base, version } => write!(
                f,
                "the delta's version {version} is not past its base version {base}"
            ),
            DeltaError::List { list, problem } => write!(f, "{list}: {problem}"),
        }
    }
}

impl std::error::Error for DeltaError {}

/// What identifies an entry of a keyed list.
trait Keyed {
    type Key: Ord + Clone + Debug;
    fn key(&self) -> Self::Key;
}

impl Keyed for Peer {
    type Key = u32;
    fn key(&self) -> u32 {
        self.host
    }
}

impl Keyed for PortConfig {
    type Key = u16;
    fn key(&self) -> u16 {
        self.id
    }
}

impl Keyed for TenantFib {
    type Key = String;
    fn key(&self) -> String {
        self.tenant.clone()
    }
}

impl Keyed for InstanceConfig {
    type Key = String;
    fn key(&self) -> String {
        self.name.clone()
    }
}

impl Keyed for GroupPolicy {
    type Key = (u32, u32);
    fn key(&self) -> (u32, u32) {
        (self.vni, self.group)
    }
}

impl Keyed for HealthCheck {
    type Key = (String, String, String, u16);
    fn key(&self) -> (String, String, String, u16) {
        (
            self.tenant.clone(),
            self.middlebox.clone(),
            self.backend.clone(),
            self.port,
        )
    }
}

impl Keyed for PeerKeys {
    type Key = u32;
    fn key(&self) -> u32 {
        self.host
    }
}

/// Whether no key repeats in `list`.
fn unique<T: Keyed>(list: &[T]) -> bool {
    let mut seen = BTreeSet::new();
    list.iter().all(|e| seen.insert(e.key()))
}

/// The changes from `old` to `new`.
fn list_delta<T: Keyed + Clone + PartialEq>(old: &[T], new: &[T]) -> ListDelta<T, T::Key> {
    if old == new {
        return ListDelta::default();
    }
    if !unique(old) || !unique(new) {
        return ListDelta {
            replace: Some(new.to_vec()),
            ..ListDelta::default()
        };
    }
    let before: BTreeMap<T::Key, &T> = old.iter().map(|e| (e.key(), e)).collect();
    let after: BTreeSet<T::Key> = new.iter().map(Keyed::key).collect();
    let mut d = ListDelta {
        remove: old
            .iter()
            .map(Keyed::key)
            .filter(|k| !after.contains(k))
            .collect(),
        ..ListDelta::default()
    };
    for (at, e) in new.iter().enumerate() {
        match before.get(&e.key()) {
            Some(was) if *was == e => {}
            Some(_) => d.change.push(e.clone()),
            None => d.add.push(Added {
                at,
                entry: e.clone(),
            }),
        }
    }
    // Entries that stay keep their relative order unless told otherwise: the
    // order is sent only if that would be wrong.
    let stay_old = old.iter().map(Keyed::key).filter(|k| after.contains(k));
    let stay_new = new
        .iter()
        .map(Keyed::key)
        .filter(|k| before.contains_key(k));
    if !stay_old.eq(stay_new) {
        d.order = Some(new.iter().map(Keyed::key).collect());
    }
    d
}

/// `old` changed by `d` (see [`ListDelta`]).
fn apply_list<T: Keyed + Clone>(
    list: &'static str,
    old: &[T],
    d: &ListDelta<T, T::Key>,
) -> Result<Vec<T>, DeltaError> {
    let bad = |problem: String| DeltaError::List { list, problem };
    if let Some(all) = &d.replace {
        if !(d.remove.is_empty() && d.change.is_empty() && d.add.is_empty() && d.order.is_none()) {
            return Err(bad(
                "a replaced list takes no removals, changes, additions or order".into(),
            ));
        }
        return Ok(all.clone());
    }
    if d.is_empty() {
        return Ok(old.to_vec());
    }
    if !unique(old) {
        return Err(bad(
            "the running list repeats a key: only a whole new list (`replace`) applies".into(),
        ));
    }
    let mut gone = BTreeSet::new();
    for k in &d.remove {
        if !old.iter().any(|e| e.key() == *k) {
            return Err(bad(format!("cannot remove {k:?}: no such entry")));
        }
        if !gone.insert(k.clone()) {
            return Err(bad(format!("{k:?} is removed twice")));
        }
    }
    let mut kept: Vec<T> = old
        .iter()
        .filter(|e| !gone.contains(&e.key()))
        .cloned()
        .collect();
    let index: BTreeMap<T::Key, usize> =
        kept.iter().enumerate().map(|(i, e)| (e.key(), i)).collect();
    let mut changed = BTreeSet::new();
    for e in &d.change {
        let k = e.key();
        let Some(&i) = index.get(&k) else {
            return Err(bad(format!("cannot change {k:?}: no such entry")));
        };
        if !changed.insert(k.clone()) {
            return Err(bad(format!("{k:?} is changed twice")));
        }
        kept[i] = e.clone();
    }
    let total = kept.len() + d.add.len();
    let mut out = Vec::with_capacity(total);
    let mut kept = kept.into_iter();
    let mut added = BTreeSet::new();
    for a in &d.add {
        let k = a.entry.key();
        if index.contains_key(&k) || !added.insert(k.clone()) {
            return Err(bad(format!("cannot add {k:?}: it is there already")));
        }
        if a.at < out.len() || a.at >= total {
            return Err(bad(format!(
                "cannot add {k:?} at index {}: additions go by increasing index within the new list's {total} entries",
                a.at
            )));
        }
        while out.len() < a.at {
            match kept.next() {
                Some(e) => out.push(e),
                // Leaves a gap: a later index than the list can reach.
                None => {
                    return Err(bad(format!(
                        "cannot add {k:?} at index {}: the list would have a gap there",
                        a.at
                    )))
                }
            }
        }
        out.push(a.entry.clone());
    }
    out.extend(kept);
    if let Some(order) = &d.order {
        let mut by_key: BTreeMap<T::Key, T> = out.into_iter().map(|e| (e.key(), e)).collect();
        if order.len() != by_key.len() {
            return Err(bad(format!(
                "the order names {} entries, the list has {}",
                order.len(),
                by_key.len()
            )));
        }
        out = Vec::with_capacity(order.len());
        for k in order {
            match by_key.remove(k) {
                Some(e) => out.push(e),
                None => {
                    return Err(bad(format!(
                        "the order names {k:?}, which is not in the list (or twice)"
                    )))
                }
            }
        }
    }
    Ok(out)
}

impl AgentConfig {
    /// What changed from `old` to `new` (both for the same host; `new`'s
    /// version the one to reach): [`AgentConfig::apply_delta`] on `old` gives
    /// `new` back.
    pub fn delta_from(old: &AgentConfig, new: &AgentConfig) -> ConfigDelta {
        // Destructured whole, so a new field cannot be forgotten here.
        let AgentConfig {
            version,
            host,
            peers,
            ports,
            tenants,
            instances,
            group_policies,
            fabric_auth,
            pardons,
            health_checks,
        } = new;
        let fabric_auth = match (&old.fabric_auth, fabric_auth) {
            (None, None) => None,
            (Some(_), None) => Some(FabricAuthDelta::Off),
            (None, Some(n)) => Some(FabricAuthDelta::Set(n.clone())),
            (Some(o), Some(n)) => {
                let FabricAuth { peers: np } = n;
                let d = list_delta(&o.peers, np);
                (!d.is_empty()).then_some(FabricAuthDelta::Peers(d))
            }
        };
        ConfigDelta {
            host: *host,
            base_version: old.version,
            version: *version,
            peers: list_delta(&old.peers, peers),
            ports: list_delta(&old.ports, ports),
            tenants: list_delta(&old.tenants, tenants),
            instances: list_delta(&old.instances, instances),
            group_policies: list_delta(&old.group_policies, group_policies),
            fabric_auth,
            pardons: (old.pardons != *pardons).then(|| pardons.clone()),
            health_checks: list_delta(&old.health_checks, health_checks),
        }
    }

    /// This configuration changed by `d`: the configuration of `d.version`.
    /// Refused (and nothing is changed) if `d` is for another host or another
    /// base version, or names entries wrongly ([`DeltaError`]).
    pub fn apply_delta(&self, d: &ConfigDelta) -> Result<AgentConfig, DeltaError> {
        if d.host != self.host {
            return Err(DeltaError::Host {
                config: self.host,
                delta: d.host,
            });
        }
        if d.base_version != self.version {
            return Err(DeltaError::Base {
                running: self.version,
                base: d.base_version,
            });
        }
        if d.version <= d.base_version {
            return Err(DeltaError::Version {
                base: d.base_version,
                version: d.version,
            });
        }
        let fabric_auth = match (&d.fabric_auth, &self.fabric_auth) {
            (None, f) => f.clone(),
            (Some(FabricAuthDelta::Off), _) => None,
            (Some(FabricAuthDelta::Set(f)), _) => Some(f.clone()),
            (Some(FabricAuthDelta::Peers(p)), Some(f)) => Some(FabricAuth {
                peers: apply_list("fabric_auth.peers", &f.peers, p)?,
            }),
            (Some(FabricAuthDelta::Peers(_)), None) => {
                return Err(DeltaError::List {
                    list: "fabric_auth.peers",
                    problem: "fabric authentication is off here: nothing to change".into(),
                })
            }
        };
        Ok(AgentConfig {
            version: d.version,
            host: self.host,
            peers: apply_list("peers", &self.peers, &d.peers)?,
            ports: apply_list("ports", &self.ports, &d.ports)?,
            tenants: apply_list("tenants", &self.tenants, &d.tenants)?,
            instances: apply_list("instances", &self.instances, &d.instances)?,
            group_policies: apply_list("group_policies", &self.group_policies, &d.group_policies)?,
            fabric_auth,
            pardons: d.pardons.clone().unwrap_or_else(|| self.pardons.clone()),
            health_checks: apply_list("health_checks", &self.health_checks, &d.health_checks)?,
        })
    }
}

impl ConfigDelta {
    /// Whether nothing but the version changes.
    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
            && self.ports.is_empty()
            && self.tenants.is_empty()
            && self.instances.is_empty()
            && self.group_policies.is_empty()
            && self.fabric_auth.is_none()
            && self.pardons.is_none()
            && self.health_checks.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::{ChainName, FabricKey, PortKind};

    /// A small deterministic generator (xorshift64*), so every run tests the
    /// same configurations.
    struct Gen(u64);

    impl Gen {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }

        fn chance(&mut self, percent: u64) -> bool {
            self.below(100) < percent
        }

        /// Some of `0..n`, each with its given chance, in increasing order
        /// or (one time in four) shuffled; with `dups`, a key now and then twice.
        fn keys(&mut self, n: u64, percent: u64, dups: bool) -> Vec<u64> {
            let mut k: Vec<u64> = (0..n).filter(|_| self.chance(percent)).collect();
            if self.chance(25) {
                for i in (1..k.len()).rev() {
                    let j = self.below(i as u64 + 1) as usize;
                    k.swap(i, j);
                }
            }
            if dups && !k.is_empty() && self.chance(10) {
                let i = self.below(k.len() as u64) as usize;
                k.insert(i, k[i]);
            }
            k
        }
    }

    /// A configuration of host 1 drawn from `g`: the same keys come back with
    /// the same or other contents, so two draws share some entries.
    fn config(g: &mut Gen, version: u64, dups: bool) -> AgentConfig {
        let v = |g: &mut Gen| g.below(3) as u32;
        AgentConfig {
            version,
            host: 1,
            peers: g
                .keys(30, 60, dups)
                .into_iter()
                .map(|h| Peer {
                    host: h as u32,
                    underlay: Ipv4Addr::new(10, 0, v(g) as u8, h as u8),
                })
                .collect(),
            ports: g
                .keys(12, 50, dups)
                .into_iter()
                .map(|p| PortConfig {
                    id: p as u16,
                    vni: v(g),
                    kind: if p % 2 == 0 {
                        PortKind::Vm {
                            name: format!("vm{p}"),
                            iface: format!("p{p}"),
                            mac: "02:00:00:00:00:01".into(),
                            weight: 1 + v(g) as u16,
                        }
                    } else {
                        PortKind::Instance {
                            name: format!("t/fw/{p}"),
                        }
                    },
                })
                .collect(),
            tenants: g
                .keys(8, 50, dups)
                .into_iter()
                .map(|t| TenantFib {
                    tenant: format!("t{t}"),
                    vni: 100 + t as u32,
                    entries: Vec::new(),
                    groups: Vec::new(),
                    senders: Some((0..v(g)).collect()),
                    sources: None,
                    chains: vec![ChainName {
                        id: 1,
                        name: format!("c{}", v(g)),
                        reverse: false,
                    }],
                })
                .collect(),
            instances: g
                .keys(6, 50, dups)
                .into_iter()
                .map(|i| InstanceConfig {
                    name: format!("t/fw/{i}"),
                    tenant: "t".into(),
                    middlebox: "fw".into(),
                    port: i as u16,
                    vni: 100,
                    chain_yaml: format!("chain {}", v(g)),
                    state: "local".into(),
                    state_password: g
                        .chance(30)
                        .then(|| crate::StorePassword::new(format!("pw{}", v(g)))),
                    backends: Vec::new(),
                })
                .collect(),
            group_policies: g
                .keys(6, 50, dups)
                .into_iter()
                .map(|k| GroupPolicy {
                    vni: 100 + (k % 2) as u32,
                    group: k as u32,
                    pinned: g.chance(50),
                    lease_epoch: g.below(2),
                    ..GroupPolicy::default()
                })
                .collect(),
            fabric_auth: g.chance(70).then(|| FabricAuth {
                peers: g
                    .keys(30, 60, dups)
                    .into_iter()
                    .map(|h| PeerKeys {
                        host: h as u32,
                        tx: FabricKey {
                            id: v(g) as u8,
                            key: "ab".repeat(32),
                        },
                        rx: Vec::new(),
                    })
                    .collect(),
            }),
            pardons: (0..v(g))
                .map(|h| Pardon {
                    host: h,
                    generation: g.below(2),
                })
                .collect(),
            health_checks: g
                .keys(4, 50, dups)
                .into_iter()
                .map(|k| HealthCheck {
                    tenant: "t".into(),
                    middlebox: "lb".into(),
                    backend: format!("10.0.0.{k}"),
                    port: 1,
                    addr: Ipv4Addr::new(10, 0, 0, k as u8),
                    tcp_port: 80,
                    http_path: None,
                    interval_ms: 1000 * (1 + g.below(2)),
                    timeout_ms: 500,
                })
                .collect(),
        }
    }

    /// The delta of `old` and `new` brings `old` to `new`, also after a trip
    /// through JSON (as the agent receives it).
    fn round_trip(old: &AgentConfig, new: &AgentConfig) -> ConfigDelta {
        let d = AgentConfig::delta_from(old, new);
        assert_eq!(
            (d.base_version, d.version, d.host),
            (old.version, new.version, 1)
        );
        let got = old.apply_delta(&d).unwrap_or_else(|e| panic!("{e}: {d:?}"));
        assert_eq!(&got, new, "delta {d:?}");
        let json = serde_json::to_string(&d).unwrap();
        let back: ConfigDelta = serde_json::from_str(&json).unwrap();
        assert_eq!(back, d, "{json}");
        assert_eq!(&old.apply_delta(&back).unwrap(), new);
        d
    }

    /// The property: for every pair of configurations (many drawn ones,
    /// with keys gone, new, changed, reordered and repeated), applying the
    /// delta gives the new one exactly, list order included.
    #[test]
    fn a_delta_applied_gives_the_new_configuration_for_every_pair() {
        let mut g = Gen(0x5eed_1234_abcd_0001);
        let (mut orders, mut replaces, mut fabric_off) = (0, 0, 0);
        for round in 0..400u64 {
            let dups = round % 5 == 0;
            let old = config(&mut g, 7, dups);
            let new = config(&mut g, 8, dups);
            let d = round_trip(&old, &new);
            orders += usize::from(d.peers.order.is_some());
            replaces += usize::from(d.peers.replace.is_some());
            fabric_off += usize::from(d.fabric_auth == Some(FabricAuthDelta::Off));
            // And back (another change), and to itself with a new version.
            let back = AgentConfig {
                version: 9,
                ..old.clone()
            };
            round_trip(&new, &back);
            let same = AgentConfig {
                version: 8,
                ..old.clone()
            };
            assert!(round_trip(&old, &same).is_empty());
        }
        // The draws did exercise reordering, repeated keys and fabric
        // authentication turned off.
        assert!(
            orders > 10 && replaces > 5 && fabric_off > 10,
            "{orders} {replaces} {fabric_off}"
        );
    }

    /// A small change sends little: one new peer in a sorted list of 1,000 is
    /// one addition (no order, no other peer).
    #[test]
    fn a_small_change_is_a_small_delta() {
        let peer = |h: u32| Peer {
            host: h,
            underlay: Ipv4Addr::from(0x0a00_0000 | h),
        };
        let old = AgentConfig {
            version: 3,
            host: 1,
            peers: (1..=1000).filter(|h| *h != 500).map(peer).collect(),
            ..AgentConfig::default()
        };
        let new = AgentConfig {
            version: 4,
            peers: (1..=1000).map(peer).collect(),
            ..old.clone()
        };
        let d = round_trip(&old, &new);
        assert_eq!(d.peers.add.len(), 1);
        assert_eq!(d.peers.add[0].at, 499);
        assert!(d.peers.order.is_none() && d.peers.change.is_empty());
        let (full, delta) = (
            serde_json::to_vec(&new).unwrap().len(),
            serde_json::to_vec(&d).unwrap().len(),
        );
        assert!(delta * 100 < full, "delta {delta} bytes, full {full}");
        // Unchanged lists are not written at all.
        let json = serde_json::to_string(&d).unwrap();
        assert!(
            !json.contains("ports") && !json.contains("tenants"),
            "{json}"
        );
    }

    #[test]
    fn bad_deltas_are_refused_with_the_reason() {
        let mut g = Gen(42);
        let old = loop {
            let c = config(&mut g, 5, false);
            if c.peers.len() >= 3 && c.fabric_auth.is_none() {
                break c;
            }
        };
        let ok = ConfigDelta {
            host: 1,
            base_version: 5,
            version: 6,
            peers: ListDelta::default(),
            ports: ListDelta::default(),
            tenants: ListDelta::default(),
            instances: ListDelta::default(),
            group_policies: ListDelta::default(),
            fabric_auth: None,
            pardons: None,
            health_checks: ListDelta::default(),
        };
        assert_eq!(old.apply_delta(&ok).unwrap().version, 6);
        let err = |d: ConfigDelta| old.apply_delta(&d).unwrap_err();
        assert_eq!(
            err(ConfigDelta {
                host: 2,
                ..ok.clone()
            }),
            DeltaError::Host {
                config: 1,
                delta: 2
            }
        );
        let stale = err(ConfigDelta {
            base_version: 4,
            ..ok.clone()
        });
        assert_eq!(
            stale,
            DeltaError::Base {
                running: 5,
                base: 4
            }
        );
        assert!(
            stale.to_string().contains("version 4") && stale.to_string().contains("version 5 runs")
        );
        assert_eq!(
            err(ConfigDelta {
                version: 5,
                ..ok.clone()
            }),
            DeltaError::Version {
                base: 5,
                version: 5
            }
        );
        let peers = |p: ListDelta<Peer, u32>| {
            err(ConfigDelta {
                peers: p,
                ..ok.clone()
            })
            .to_string()
        };
        let there = old.peers[0];
        let absent = (0..)
            .find(|h| !old.peers.iter().any(|p| p.host == *h))
            .unwrap();
        let e = peers(ListDelta {
            remove: vec![absent],
            ..ListDelta::default()
        });
        assert!(
            e.starts_with("peers: cannot remove") && e.contains(&absent.to_string()),
            "{e}"
        );
        let e = peers(ListDelta {
            remove: vec![there.host, there.host],
            ..ListDelta::default()
        });
        assert!(e.contains("removed twice"), "{e}");
        let e = peers(ListDelta {
            change: vec![Peer {
                host: absent,
                ..there
            }],
            ..ListDelta::default()
        });
        assert!(e.contains("cannot change"), "{e}");
        let e = peers(ListDelta {
            add: vec![Added {
                at: 0,
                entry: there,
            }],
            ..ListDelta::default()
        });
        assert!(e.contains("there already"), "{e}");
        let fresh = Peer {
            host: absent,
            ..there
        };
        let e = peers(ListDelta {
            add: vec![Added {
                at: old.peers.len() + 1,
                entry: fresh,
            }],
            ..ListDelta::default()
        });
        assert!(e.contains("index"), "{e}");
        let e = peers(ListDelta {
            order: Some(vec![there.host]),
            ..ListDelta::default()
        });
        assert!(e.contains("the order names 1 entries"), "{e}");
        let mut twice: Vec<u32> = old.peers.iter().map(|p| p.host).collect();
        twice[1] = twice[0];
        let e = peers(ListDelta {
            order: Some(twice),
            ..ListDelta::default()
        });
        assert!(e.contains("not in the list (or twice)"), "{e}");
        let e = peers(ListDelta {
            replace: Some(Vec::new()),
            remove: vec![there.host],
            ..ListDelta::default()
        });
        assert!(e.contains("replaced list takes no"), "{e}");
        let e = err(ConfigDelta {
            fabric_auth: Some(FabricAuthDelta::Peers(ListDelta {
                remove: vec![2],
                ..ListDelta::default()
            })),
            ..ok.clone()
        })
        .to_string();
        assert!(e.contains("fabric authentication is off"), "{e}");
        // A gap: an addition past what the kept entries can fill.
        let one = AgentConfig {
            peers: Vec::new(),
            ..old.clone()
        };
        let gap = ConfigDelta {
            peers: ListDelta {
                add: vec![
                    Added {
                        at: 1,
                        entry: there,
                    },
                    Added {
                        at: 2,
                        entry: fresh,
                    },
                ],
                ..ListDelta::default()
            },
            ..ok.clone()
        };
        let e = one.apply_delta(&gap).unwrap_err().to_string();
        assert!(e.contains("index 1") || e.contains("gap"), "{e}");
    }

    /// The wire form (docs/CONTROLLER.md, "Pushing"): unchanged lists are
    /// absent, additions carry their index, fabric authentication turned off
    /// is `"off"`.
    #[test]
    fn the_wire_form_is_documented_json() {
        let old = AgentConfig {
            version: 1,
            host: 4,
            ..AgentConfig::default()
        };
        let new = AgentConfig {
            version: 2,
            host: 4,
            peers: vec![Peer {
                host: 9,
                underlay: Ipv4Addr::new(10, 0, 0, 9),
            }],
            pardons: vec![Pardon {
                host: 9,
                generation: 1,
            }],
            ..AgentConfig::default()
        };
        let d = AgentConfig::delta_from(&old, &new);
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(
            json,
            r#"{"host":4,"base_version":1,"version":2,"peers":{"add":[{"at":0,"entry":{"host":9,"underlay":"10.0.0.9"}}]},"pardons":[{"host":9,"generation":1}]}"#
        );
        let off = AgentConfig::delta_from(
            &AgentConfig {
                fabric_auth: Some(FabricAuth::default()),
                ..old.clone()
            },
            &AgentConfig {
                version: 2,
                ..old.clone()
            },
        );
        assert_eq!(
            serde_json::to_string(&off).unwrap(),
            r#"{"host":4,"base_version":1,"version":2,"fabric_auth":"off"}"#
        );
    }
}
