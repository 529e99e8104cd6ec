//! The desired state in etcd: what several controllers share, one of them
//! leading (see `crate::leader`). Every record is a key of its own under the
//! store's root (`/sluice/` unless told), its value JSON:
//!
//! | key | value |
//! |---|---|
//! | `state/meta` | next VNI, next block id |
//! | `state/tenants/NAME` | the spec's YAML, VNI, generation |
//! | `state/hosts/ID` | name, underlay, API, capacity |
//! | `state/vms/TENANT/NAME` | the registration and its port |
//! | `state/instances/TENANT/MIDDLEBOX/IDX` | host and port |
//! | `state/why/…`, `scaled/…`, `draining/…`, `scaling/…`, `backend_drains/…`, `instance_drains/…` | as in the SQLite tables |
//! | `state/blocks/ID`, `state/fabric`, `state/contained/H`, `state/cordoned/H`, `state/pardons/H` | |
//! | `configs/HOST` | the host's last configuration, with its version |
//! | `audit/SEQ` (20 digits), `audit-seq` | the audit log and its last number |
//!
//! Path components are escaped (`%` and `/`), so any name makes one key.
//!
//! A save writes, in one transaction, the keys whose value changed since the
//! last save and deletes the keys that are gone (the first save compares
//! with what [`EtcdStore::load`] read), like the SQLite store's rows. Every
//! transaction is guarded by the writer's leadership: it applies only while
//! the leader key is the one this controller created ([`Guard`]), so a
//! controller that lost its lease without knowing it (paused, cut off) cannot
//! overwrite what the new leader decided.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sluice_etcd::{Client, Compare, Op, Txn};
use sluice_proto::{AgentConfig, HostCapacity, VmRegistration};
use sluice_tenant::TenantSpec;

use super::{Store, StoreError};
use crate::audit::{AuditEntry, AuditQuery};
use crate::desired::{Desired, Host, Instance, Scaled, Tenant, Vm, Why};

/// The leadership every write is conditional on: the leader key and the
/// revision that created it (this controller's campaign).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    /// The leader key.
    pub key: Vec<u8>,
    /// The revision at which this controller created it.
    pub revision: i64,
}

impl Guard {
    fn compare(&self) -> Compare {
        Compare::CreateRevision(self.key.clone(), self.revision)
    }
}

/// A key's path component, escaped: `%` and `/` cannot split or merge keys.
pub(crate) fn esc(s: &str) -> String {
    s.replace('%', "%25").replace('/', "%2F")
}

fn unesc(s: &str) -> String {
    s.replace("%2F", "/").replace("%25", "%")
}

/// The desired state kept in etcd.
pub struct EtcdStore {
    client: Arc<Client>,
    root: String,
    guard: Option<Guard>,
    /// Each key under `state/` and `configs/` as the last committed save (or
    /// the load) left it: a hash of its value.
    written: HashMap<String, u64>,
    /// The configuration versions stored, by host.
    versions: BTreeMap<u32, u64>,
    /// The audit log's last number.
    audit_seq: Option<u64>,
}

#[derive(Serialize, Deserialize)]
struct MetaRec {
    next_vni: u32,
    next_block: u64,
}

#[derive(Serialize, Deserialize)]
struct TenantRec {
    yaml: String,
    vni: u32,
    generation: u64,
}

#[derive(Serialize, Deserialize)]
struct HostRec {
    name: String,
    underlay: std::net::Ipv4Addr,
    api: String,
    #[serde(default)]
    capacity: Option<HostCapacity>,
}

#[derive(Serialize, Deserialize)]
struct VmRec {
    reg: VmRegistration,
    port: u16,
}

#[derive(Serialize, Deserialize)]
struct InstanceRec {
    host: u32,
    port: u16,
}

#[derive(Serialize, Deserialize)]
struct WhyRec {
    policy: String,
    reason: String,
}

#[derive(Serialize, Deserialize)]
struct ScaledRec {
    count: u32,
    spec_count: u32,
}

#[derive(Serialize, Deserialize)]
struct FabricRec {
    /// Key id and the secret in hex, oldest first.
    secrets: Vec<(u8, String)>,
    sending: u8,
}

/// What a save would write.
struct Records {
    /// Each record's value by key below the root.
    values: BTreeMap<String, Vec<u8>>,
    /// Configurations whose stored version is current: their keys stay.
    kept: Vec<String>,
}

fn hash_of(bytes: &[u8]) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    bytes.hash(&mut h);
    h.finish()
}

fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(what.to_string())
}

/// Bytes as lowercase hex.
pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Hex back to bytes (None: not hex).
pub(crate) fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn json<T: Serialize>(v: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(v).map_err(corrupt)
}

impl EtcdStore {
    /// A store under `root` (ending in `/`) in the cluster `client` talks to,
    /// writing only while `guard` holds (None: unguarded, for tools and
    /// tests).
    pub fn new(client: Arc<Client>, root: &str, guard: Option<Guard>) -> EtcdStore {
        let mut root = root.to_string();
        if !root.ends_with('/') {
            root.push('/');
        }
        EtcdStore {
            client,
            root,
            guard,
            written: HashMap::new(),
            versions: BTreeMap::new(),
            audit_seq: None,
        }
    }

    fn key(&self, rest: &str) -> Vec<u8> {
        format!("{}{rest}", self.root).into_bytes()
    }

    /// Every record of `d` and the configurations in `configs` whose version
    /// is not the stored one, by key below the root.
    fn records(
        &self,
        d: &Desired,
        configs: &BTreeMap<u32, AgentConfig>,
    ) -> Result<Records, StoreError> {
        let mut r = BTreeMap::new();
        r.insert(
            "state/meta".to_string(),
            json(&MetaRec {
                next_vni: d.next_vni,
                next_block: d.next_block,
            })?,
        );
        for t in d.tenants.values() {
            r.insert(
                format!("state/tenants/{}", esc(&t.name)),
                json(&TenantRec {
                    yaml: t.yaml.clone(),
                    vni: t.vni,
                    generation: t.generation,
                })?,
            );
        }
        for h in d.hosts.values() {
            r.insert(
                format!("state/hosts/{}", h.id),
                json(&HostRec {
                    name: h.name.clone(),
                    underlay: h.underlay,
                    api: h.api.clone(),
                    capacity: h.capacity.clone(),
                })?,
            );
        }
        for ((t, n), vm) in &d.vms {
            r.insert(
                format!("state/vms/{}/{}", esc(t), esc(n)),
                json(&VmRec {
                    reg: vm.reg.clone(),
                    port: vm.port,
                })?,
            );
        }
        for ((t, m, i), inst) in &d.instances {
            r.insert(
                format!("state/instances/{}/{}/{i}", esc(t), esc(m)),
                json(&InstanceRec {
                    host: inst.host,
                    port: inst.port,
                })?,
            );
        }
        for ((t, m, i), w) in &d.why {
            r.insert(
                format!("state/why/{}/{}/{i}", esc(t), esc(m)),
                json(&WhyRec {
                    policy: w.policy.to_string(),
                    reason: w.reason.clone(),
                })?,
            );
        }
        for ((t, m), s) in &d.scaled {
            r.insert(
                format!("state/scaled/{}/{}", esc(t), esc(m)),
                json(&ScaledRec {
                    count: s.count,
                    spec_count: s.spec_count,
                })?,
            );
        }
        for (t, m, i) in &d.draining {
            r.insert(
                format!("state/draining/{}/{}/{i}", esc(t), esc(m)),
                b"{}".to_vec(),
            );
        }
        for ((t, m, i), until) in &d.instance_drains {
            r.insert(
                format!("state/instance_drains/{}/{}/{i}", esc(t), esc(m)),
                json(until)?,
            );
        }
        for ((t, m, b), until) in &d.backend_drains {
            r.insert(
                format!("state/backend_drains/{}/{}/{}", esc(t), esc(m), esc(b)),
                json(until)?,
            );
        }
        for ((t, c), cfg) in &d.scaling {
            r.insert(format!("state/scaling/{}/{}", esc(t), esc(c)), json(cfg)?);
        }
        for (id, b) in &d.blocks {
            r.insert(format!("state/blocks/{id}"), json(b)?);
        }
        if let Some(f) = &d.fabric {
            r.insert(
                "state/fabric".into(),
                json(&FabricRec {
                    secrets: f.secrets.iter().map(|(id, s)| (*id, hex(s))).collect(),
                    sending: f.sending,
                })?,
            );
        }
        for h in &d.contained {
            r.insert(format!("state/contained/{h}"), b"{}".to_vec());
        }
        for h in &d.cordoned {
            r.insert(format!("state/cordoned/{h}"), b"{}".to_vec());
        }
        for (h, g) in &d.pardons {
            r.insert(format!("state/pardons/{h}"), json(g)?);
        }
        // Configurations are large: only those whose version moved are
        // serialized; the others keep their key.
        let mut kept = Vec::new();
        for (h, c) in configs {
            let k = format!("configs/{h}");
            if self.versions.get(h) == Some(&c.version) {
                kept.push(k);
            } else {
                r.insert(k, json(c)?);
            }
        }
        Ok(Records { values: r, kept })
    }

    /// Writes `ops` in one transaction guarded by the leadership.
    fn commit(&self, ops: Vec<Op>) -> Result<(), StoreError> {
        let t = Txn {
            compare: self.guard.iter().map(Guard::compare).collect(),
            success: ops,
            failure: Vec::new(),
        };
        if self.client.txn(&t)?.succeeded {
            Ok(())
        } else {
            Err(StoreError::NotLeader)
        }
    }
}

impl Store for EtcdStore {
    fn load(
        &self,
        registry: Option<&sluice_chain::Registry>,
    ) -> Result<(Desired, BTreeMap<u32, AgentConfig>), StoreError> {
        let mut d = Desired {
            next_vni: 1,
            next_block: 1,
            ..Desired::default()
        };
        let mut configs = BTreeMap::new();
        let mut fabric = None;
        let kvs = self.client.get_prefix(&self.key("state/"))?;
        let confs = self.client.get_prefix(&self.key("configs/"))?;
        for kv in kvs.iter().chain(confs.iter()) {
            let key = String::from_utf8_lossy(&kv.key);
            let rest = key.strip_prefix(&self.root).unwrap_or(&key);
            let parts: Vec<String> = rest.split('/').map(unesc).collect();
            let p: Vec<&str> = parts.iter().map(String::as_str).collect();
            let bad = |e: &dyn std::fmt::Display| corrupt(format!("etcd key {rest}: {e}"));
            let v = &kv.value;
            let num = |s: &str| -> Result<u32, StoreError> { s.parse().map_err(|e| bad(&e)) };
            macro_rules! parse {
                () => {
                    serde_json::from_slice(v).map_err(|e| bad(&e))?
                };
            }
            match p.as_slice() {
                ["state", "meta"] => {
                    let m: MetaRec = parse!();
                    d.next_vni = m.next_vni;
                    d.next_block = m.next_block;
                }
                ["state", "tenants", name] => {
                    let t: TenantRec = parse!();
                    let spec =
                        TenantSpec::parse(&t.yaml, &format!("stored tenant {name}"), registry)
                            .map_err(|e| bad(&e))?;
                    d.tenants.insert(
                        name.to_string(),
                        std::sync::Arc::new(Tenant {
                            name: name.to_string(),
                            yaml: t.yaml,
                            spec,
                            vni: t.vni,
                            generation: t.generation,
                        }),
                    );
                }
                ["state", "hosts", id] => {
                    let h: HostRec = parse!();
                    let id = num(id)?;
                    d.hosts.insert(
                        id,
                        Host {
                            id,
                            name: h.name,
                            underlay: h.underlay,
                            api: h.api,
                            capacity: h.capacity,
                        },
                    );
                }
                ["state", "vms", t, n] => {
                    let vm: VmRec = parse!();
                    d.vms.insert(
                        (t.to_string(), n.to_string()),
                        Vm {
                            reg: vm.reg,
                            port: vm.port,
                        },
                    );
                }
                ["state", "instances", t, m, i] => {
                    let r: InstanceRec = parse!();
                    d.instances.insert(
                        (t.to_string(), m.to_string(), num(i)?),
                        Instance {
                            host: r.host,
                            port: r.port,
                        },
                    );
                }
                ["state", "why", t, m, i] => {
                    let w: WhyRec = parse!();
                    d.why.insert(
                        (t.to_string(), m.to_string(), num(i)?),
                        Why {
                            policy: w.policy.parse().map_err(|e| bad(&e))?,
                            reason: w.reason,
                        },
                    );
                }
                ["state", "scaled", t, m] => {
                    let s: ScaledRec = parse!();
                    d.scaled.insert(
                        (t.to_string(), m.to_string()),
                        Scaled {
                            count: s.count,
                            spec_count: s.spec_count,
                        },
                    );
                }
                ["state", "draining", t, m, i] => {
                    d.draining.insert((t.to_string(), m.to_string(), num(i)?));
                }
                ["state", "instance_drains", t, m, i] => {
                    d.instance_drains
                        .insert((t.to_string(), m.to_string(), num(i)?), parse!());
                }
                ["state", "backend_drains", t, m, b] => {
                    d.backend_drains
                        .insert((t.to_string(), m.to_string(), b.to_string()), parse!());
                }
                ["state", "scaling", t, c] => {
                    d.scaling.insert((t.to_string(), c.to_string()), parse!());
                }
                ["state", "blocks", _] => {
                    let b: crate::blocks::Block = parse!();
                    d.blocks.insert(b.id, b);
                }
                ["state", "fabric"] => {
                    let f: FabricRec = parse!();
                    let mut secrets = Vec::new();
                    for (id, s) in f.secrets {
                        let s: [u8; 32] = unhex(&s)
                            .and_then(|b| b.try_into().ok())
                            .ok_or_else(|| bad(&format!("fabric secret {id} is not 32 bytes")))?;
                        secrets.push((id, s));
                    }
                    if !secrets.iter().any(|s| s.0 == f.sending) {
                        return Err(bad(&"no fabric secret is marked as sending"));
                    }
                    fabric = Some(crate::fabric::FabricSecret {
                        secrets,
                        sending: f.sending,
                    });
                }
                ["state", "contained", h] => {
                    d.contained.insert(num(h)?);
                }
                ["state", "cordoned", h] => {
                    d.cordoned.insert(num(h)?);
                }
                ["state", "pardons", h] => {
                    d.pardons.insert(num(h)?, parse!());
                }
                ["configs", h] => {
                    let c: AgentConfig = parse!();
                    configs.insert(num(h)?, c);
                }
                _ => return Err(bad(&"not a key this version of Sluice writes")),
            }
        }
        d.fabric = fabric;
        Ok((d, configs))
    }

    fn save(
        &mut self,
        d: &Desired,
        configs: &BTreeMap<u32, AgentConfig>,
    ) -> Result<(), StoreError> {
        if self.written.is_empty() {
            // Nothing loaded through this store yet: learn what is there, so
            // the first save deletes what is gone and rewrites nothing else.
            self.remember_stored()?;
        }
        let Records {
            values: records,
            kept,
        } = self.records(d, configs)?;
        let mut ops = Vec::new();
        let mut next: HashMap<String, u64> = HashMap::with_capacity(records.len() + kept.len());
        for (k, v) in records {
            let h = hash_of(&v);
            if self.written.get(&k) != Some(&h) {
                ops.push(Op::Put {
                    key: self.key(&k),
                    value: v,
                    lease: 0,
                });
            }
            next.insert(k, h);
        }
        for k in kept {
            if let Some(h) = self.written.get(&k) {
                next.insert(k, *h);
            }
        }
        for k in self.written.keys() {
            if !next.contains_key(k) {
                ops.push(Op::Delete(self.key(k)));
            }
        }
        if !ops.is_empty() {
            self.commit(ops)?;
        }
        // Only once committed: a failed save leaves them to be written again.
        self.written = next;
        self.versions = configs.iter().map(|(h, c)| (*h, c.version)).collect();
        Ok(())
    }

    fn append_audit(&mut self, e: &AuditEntry) -> Result<u64, StoreError> {
        let last = match self.audit_seq {
            Some(s) => s,
            None => self.read_audit_seq()?,
        };
        let seq = last + 1;
        let entry = json(&AuditEntry { seq, ..e.clone() })?;
        let t = Txn {
            compare: self
                .guard
                .iter()
                .map(Guard::compare)
                .chain(std::iter::once(Compare::Value(
                    self.key("audit-seq"),
                    last.to_string().into_bytes(),
                )))
                .collect(),
            success: vec![
                Op::Put {
                    key: self.key(&format!("audit/{seq:020}")),
                    value: entry,
                    lease: 0,
                },
                Op::Put {
                    key: self.key("audit-seq"),
                    value: seq.to_string().into_bytes(),
                    lease: 0,
                },
            ],
            failure: Vec::new(),
        };
        // The first entry ever: the counter key does not exist yet.
        let t = if last == 0 {
            Txn {
                compare: self
                    .guard
                    .iter()
                    .map(Guard::compare)
                    .chain(std::iter::once(Compare::CreateRevision(
                        self.key("audit-seq"),
                        0,
                    )))
                    .collect(),
                ..t
            }
        } else {
            t
        };
        if !self.client.txn(&t)?.succeeded {
            // Another writer numbered entries since (or leadership moved):
            // read the counter again next time.
            self.audit_seq = None;
            return Err(StoreError::NotLeader);
        }
        self.audit_seq = Some(seq);
        Ok(seq)
    }

    fn audit(&self, q: &AuditQuery) -> Result<Vec<AuditEntry>, StoreError> {
        let from = self.key(&format!("audit/{:020}", q.since + 1));
        let end = sluice_etcd::prefix_end(&self.key("audit/"));
        let mut hits = Vec::new();
        for kv in self.client.range(&from, Some(&end))? {
            let e: AuditEntry = serde_json::from_slice(&kv.value).map_err(corrupt)?;
            if q.matches(&e) {
                hits.push(e);
            }
        }
        let skip = hits.len().saturating_sub(q.limit());
        Ok(hits.into_iter().skip(skip).collect())
    }
}

impl EtcdStore {
    /// Reads which keys are stored (and their values' hashes) into
    /// `written`, and the stored configuration versions.
    fn remember_stored(&mut self) -> Result<(), StoreError> {
        let mut written = HashMap::new();
        let mut versions = BTreeMap::new();
        for prefix in ["state/", "configs/"] {
            for kv in self.client.get_prefix(&self.key(prefix))? {
                let key = String::from_utf8_lossy(&kv.key);
                let rest = key.strip_prefix(&self.root).unwrap_or(&key).to_string();
                if let Some(h) = rest.strip_prefix("configs/") {
                    let h: u32 = h.parse().map_err(|_| corrupt(format!("etcd key {rest}")))?;
                    let c: AgentConfig = serde_json::from_slice(&kv.value).map_err(corrupt)?;
                    versions.insert(h, c.version);
                }
                written.insert(rest, hash_of(&kv.value));
            }
        }
        self.written = written;
        self.versions = versions;
        Ok(())
    }

    fn read_audit_seq(&self) -> Result<u64, StoreError> {
        match self.client.get(&self.key("audit-seq"))? {
            None => Ok(0),
            Some(kv) => String::from_utf8_lossy(&kv.value)
                .parse()
                .map_err(|_| corrupt("etcd key audit-seq is not a number")),
        }
    }

    /// Learns what is stored, so the next save writes only what differs
    /// (call after [`Store::load`]).
    pub fn loaded(&mut self) -> Result<(), StoreError> {
        self.remember_stored()
    }
}

#[cfg(test)]
mod tests {
    use super::super::sample::sample;
    use super::*;
    use crate::desired::versioned;
    use sluice_etcd::server::{etcd_binary, EtcdCluster};

    fn cluster() -> Option<(EtcdCluster, Arc<Client>)> {
        if etcd_binary().is_none() {
            eprintln!("skipped: etcd is not installed (apt-get install etcd-server)");
            return None;
        }
        let c = EtcdCluster::start(1).unwrap();
        let client = Arc::new(c.client().unwrap());
        Some((c, client))
    }

    /// The cluster's revision: every transaction that writes moves it by one.
    fn revision(client: &Client) -> i64 {
        client
            .txn(&Txn::default())
            .map(|r| r.revision)
            .unwrap_or_default()
    }

    #[test]
    fn state_round_trips_and_saves_write_only_what_changed() {
        let Some((_c, client)) = cluster() else {
            return;
        };
        let (mut d, reg) = sample();
        let mut cfgs = d.configs("local").unwrap();
        versioned(&BTreeMap::new(), &mut cfgs);
        let mut s = EtcdStore::new(client.clone(), "/t1/", None);
        s.save(&d, &cfgs).unwrap();

        // A new store (another controller) loads it whole.
        let other = EtcdStore::new(client.clone(), "/t1", None);
        let (d2, c2) = other.load(Some(&reg)).unwrap();
        assert!(!d.why.is_empty() && d2.fabric.is_some());
        assert_eq!(d2, d);
        assert_eq!(c2, cfgs);

        // The same state again: no transaction at all.
        let before = revision(&client);
        s.save(&d, &cfgs).unwrap();
        assert_eq!(revision(&client), before);

        // A change writes one transaction; a gone VM's key is deleted.
        let gone = d.vms.keys().next().unwrap().clone();
        d.vms.remove(&gone);
        let h = *cfgs.keys().next().unwrap();
        let mut newer = cfgs.clone();
        newer.get_mut(&h).unwrap().version += 1;
        s.save(&d, &newer).unwrap();
        assert_eq!(revision(&client), before + 1);
        let (d3, c3) = other.load(Some(&reg)).unwrap();
        assert_eq!(d3, d);
        assert_eq!(c3, newer);

        // A store that loaded first (a new leader) writes nothing it read.
        let mut third = EtcdStore::new(client.clone(), "/t1/", None);
        let (d4, c4) = third.load(Some(&reg)).unwrap();
        third.loaded().unwrap();
        let before = revision(&client);
        third.save(&d4, &c4).unwrap();
        assert_eq!(revision(&client), before);
    }

    #[test]
    fn names_with_slashes_and_percents_keep_their_own_keys() {
        assert_eq!(unesc(&esc("a/b%2Fc")), "a/b%2Fc");
        assert_ne!(esc("a/b"), esc("a%2Fb"));
        assert!(!esc("x/y").contains('/'));
    }

    #[test]
    fn a_controller_that_lost_the_leader_key_cannot_write() {
        let Some((_c, client)) = cluster() else {
            return;
        };
        let key = b"/t2/leader".to_vec();
        let won = client
            .txn(&Txn {
                compare: vec![Compare::CreateRevision(key.clone(), 0)],
                success: vec![Op::Put {
                    key: key.clone(),
                    value: b"me".to_vec(),
                    lease: 0,
                }],
                failure: vec![],
            })
            .unwrap();
        let mine = Guard {
            key: key.clone(),
            revision: won.revision,
        };
        let (d, reg) = sample();
        let mut cfgs = d.configs("local").unwrap();
        versioned(&BTreeMap::new(), &mut cfgs);
        let mut s = EtcdStore::new(client.clone(), "/t2/", Some(mine.clone()));
        s.save(&d, &cfgs).unwrap();
        let seq = s
            .append_audit(&AuditEntry {
                seq: 0,
                at_ms: 1,
                actor: "admin".into(),
                tenant: None,
                action: "a".into(),
                status: 200,
                changes: Vec::new(),
            })
            .unwrap();
        assert_eq!(seq, 1);

        // Another controller takes the key (this one's lease ran out).
        client
            .txn(&Txn {
                compare: vec![],
                success: vec![Op::Delete(key.clone())],
                failure: vec![],
            })
            .unwrap();
        client.put(&key, b"other").unwrap();
        let mut changed = d.clone();
        changed.next_vni += 7;
        let e = s.save(&changed, &cfgs).unwrap_err();
        assert!(matches!(e, StoreError::NotLeader), "{e}");
        let e = s
            .append_audit(&AuditEntry {
                seq: 0,
                at_ms: 2,
                actor: "admin".into(),
                tenant: None,
                action: "b".into(),
                status: 200,
                changes: Vec::new(),
            })
            .unwrap_err();
        assert!(matches!(e, StoreError::NotLeader), "{e}");
        let (stored, _) = EtcdStore::new(client.clone(), "/t2/", None)
            .load(Some(&reg))
            .unwrap();
        assert_eq!(stored, d, "nothing of the fenced save was written");
        let log = s.audit(&AuditQuery::default()).unwrap();
        assert_eq!(log.len(), 1);
        assert_eq!(log[0].action, "a");
    }

    #[test]
    fn the_audit_log_continues_its_numbers_under_a_new_leader() {
        let Some((_c, client)) = cluster() else {
            return;
        };
        let entry = |action: &str, tenant: Option<&str>| AuditEntry {
            seq: 0,
            at_ms: 5,
            actor: "admin".into(),
            tenant: tenant.map(String::from),
            action: action.into(),
            status: 200,
            changes: Vec::new(),
        };
        let mut first = EtcdStore::new(client.clone(), "/t3/", None);
        for i in 0..12 {
            first
                .append_audit(&entry(&format!("a{i}"), (i % 2 == 0).then_some("acme")))
                .unwrap();
        }
        let mut second = EtcdStore::new(client.clone(), "/t3/", None);
        assert_eq!(second.append_audit(&entry("next", None)).unwrap(), 13);
        let all = second.audit(&AuditQuery::default()).unwrap();
        let seqs: Vec<u64> = all.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=13).collect::<Vec<_>>());
        let acme = second
            .audit(&AuditQuery {
                tenant: Some("acme".into()),
                since: 4,
                ..AuditQuery::default()
            })
            .unwrap();
        let seqs: Vec<u64> = acme.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, vec![5, 7, 9, 11]);
        // The first store's counter is stale now: it refuses rather than
        // overwrite entry 13.
        assert!(first.append_audit(&entry("stale", None)).is_err());
        assert_eq!(first.append_audit(&entry("again", None)).unwrap(), 14);
    }
}
