//! The desired state, durable in SQLite: a restarted controller carries on with
//! the same tenants, VNIs, placements and port ids, and configuration versions
//! that keep increasing.
//!
//! Each change is written in one transaction ([`SqliteStore::save`]), so a crash leaves
//! either the state before or the state after a request, never half of one.
//!
//! A save writes only what changed: the store keeps, per table, each row's
//! primary key and a hash of the row as the last committed save wrote it,
//! and writes the rows whose hash moved and deletes the rows no longer there
//! (the first save after opening rewrites every table, since the database may
//! hold rows nothing in memory knows). A VM's registration then writes one
//! `vms` row, not every table of the fleet.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::path::Path;

use rusqlite::{params, Connection, Transaction};
use rustc_hash::FxHashMap;
use sluice_proto::{AgentConfig, VmRegistration};
use sluice_tenant::TenantSpec;

use super::{Store, StoreError, Touched};
use crate::audit::{AuditEntry, AuditQuery};
use crate::desired::{Desired, Host, Instance, Scaled, Tenant, Vm, Why};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS tenants (
    name TEXT PRIMARY KEY, yaml TEXT NOT NULL, vni INTEGER NOT NULL UNIQUE,
    generation INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS hosts (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL, underlay TEXT NOT NULL, api TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS vms (
    tenant TEXT NOT NULL, name TEXT NOT NULL, host INTEGER NOT NULL, iface TEXT NOT NULL,
    mac TEXT NOT NULL, addr TEXT NOT NULL, gateway INTEGER NOT NULL, port INTEGER NOT NULL,
    PRIMARY KEY (tenant, name));
CREATE TABLE IF NOT EXISTS instances (
    tenant TEXT NOT NULL, middlebox TEXT NOT NULL, idx INTEGER NOT NULL,
    host INTEGER NOT NULL, port INTEGER NOT NULL,
    PRIMARY KEY (tenant, middlebox, idx));
CREATE TABLE IF NOT EXISTS scaled (
    tenant TEXT NOT NULL, middlebox TEXT NOT NULL, count INTEGER NOT NULL,
    spec_count INTEGER NOT NULL, PRIMARY KEY (tenant, middlebox));
CREATE TABLE IF NOT EXISTS backend_drains (
    tenant TEXT NOT NULL, middlebox TEXT NOT NULL, backend TEXT NOT NULL,
    until_ms INTEGER NOT NULL, PRIMARY KEY (tenant, middlebox, backend));
CREATE TABLE IF NOT EXISTS instance_drains (
    tenant TEXT NOT NULL, middlebox TEXT NOT NULL, idx INTEGER NOT NULL,
    until_ms INTEGER NOT NULL, PRIMARY KEY (tenant, middlebox, idx));
CREATE TABLE IF NOT EXISTS draining (
    tenant TEXT NOT NULL, middlebox TEXT NOT NULL, idx INTEGER NOT NULL,
    PRIMARY KEY (tenant, middlebox, idx));
CREATE TABLE IF NOT EXISTS scaling (
    tenant TEXT NOT NULL, chain TEXT NOT NULL, config TEXT NOT NULL,
    PRIMARY KEY (tenant, chain));
CREATE TABLE IF NOT EXISTS placement_why (
    tenant TEXT NOT NULL, middlebox TEXT NOT NULL, idx INTEGER NOT NULL,
    policy TEXT NOT NULL, reason TEXT NOT NULL, PRIMARY KEY (tenant, middlebox, idx));
CREATE TABLE IF NOT EXISTS host_capacity (
    host INTEGER PRIMARY KEY, capacity TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS host_configs (
    host INTEGER PRIMARY KEY, version INTEGER NOT NULL, config TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS fabric_secrets (
    id INTEGER PRIMARY KEY, secret BLOB NOT NULL, sending INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS blocks (
    id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, block TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS contained (host INTEGER PRIMARY KEY);
CREATE TABLE IF NOT EXISTS cordoned (host INTEGER PRIMARY KEY);
CREATE TABLE IF NOT EXISTS pardons (host INTEGER PRIMARY KEY, generation INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, at_ms INTEGER NOT NULL, actor TEXT NOT NULL,
    tenant TEXT, action TEXT NOT NULL, status INTEGER NOT NULL, changes TEXT NOT NULL);
";

/// The controller's desired state in a SQLite file.
pub struct SqliteStore {
    conn: Connection,
    /// The version of each host's configuration this store last wrote: a
    /// configuration is only ever changed with a new version, so a save writes
    /// only the hosts whose version moved (a change touching one tenant's
    /// hosts writes those, not the whole fleet's configurations).
    written: BTreeMap<u32, u64>,
    /// What the last committed save wrote, per table, updated in place by
    /// the next save (no table is rebuilt: a save costs a lookup per row,
    /// not an allocation and an insertion).
    rows: Tables,
    /// The number of the save under way: rows it does not see are gone.
    epoch: u64,
    /// The next save rewrites every table: nothing saved since opening (the
    /// database may hold rows nothing in memory knows), or the last save
    /// failed half way through `rows`.
    full: bool,
}

/// A row's primary key, as the SQL parameters that name it (ordered, so
/// the rows of one tenant or host are a range).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum KeyPart {
    I(i64),
    T(String),
}

impl rusqlite::ToSql for KeyPart {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        match self {
            KeyPart::I(i) => i.to_sql(),
            KeyPart::T(t) => t.to_sql(),
        }
    }
}

/// What a save remembers of a row: the hash of the whole row, and the last
/// save that saw it.
#[derive(Debug, Clone, Copy)]
struct Row {
    hash: u64,
    seen: u64,
}

/// Per table, each row's key and what was last written of it, in key order:
/// a save told what a change touched ([`Touched`]) compares the rows of
/// those tenants and hosts only, a range each.
type Tables = FxHashMap<&'static str, BTreeMap<Vec<KeyPart>, Row>>;

/// A key whose first part is a tenant's name.
trait OfTenant: Ord {
    /// The least key of `tenant`.
    fn least(tenant: &str) -> Self;
    /// Its tenant.
    fn tenant(&self) -> &str;
}

impl OfTenant for (String, String) {
    fn least(tenant: &str) -> Self {
        (tenant.to_string(), String::new())
    }
    fn tenant(&self) -> &str {
        &self.0
    }
}

impl OfTenant for (String, String, u32) {
    fn least(tenant: &str) -> Self {
        (tenant.to_string(), String::new(), 0)
    }
    fn tenant(&self) -> &str {
        &self.0
    }
}

impl OfTenant for (String, String, String) {
    fn least(tenant: &str) -> Self {
        (tenant.to_string(), String::new(), String::new())
    }
    fn tenant(&self) -> &str {
        &self.0
    }
}

/// The entries of `m` of the tenants in `scope` (every entry without one).
fn of_tenants<'a, K: OfTenant, V>(
    m: &'a BTreeMap<K, V>,
    scope: Option<&'a BTreeSet<String>>,
) -> Box<dyn Iterator<Item = (&'a K, &'a V)> + 'a> {
    match scope {
        None => Box::new(m.iter()),
        Some(tenants) => Box::new(tenants.iter().flat_map(move |t| {
            m.range(K::least(t)..)
                .take_while(move |(k, _)| k.tenant() == t.as_str())
        })),
    }
}

/// [`of_tenants`] of a map the desired state shares with its copies.
fn of_tenants_shared<'a, K: OfTenant + Clone, V: Clone>(
    m: &'a crate::desired::PMap<K, V>,
    scope: Option<&'a BTreeSet<String>>,
) -> Box<dyn Iterator<Item = (&'a K, &'a V)> + 'a> {
    match scope {
        None => Box::new(m.iter()),
        Some(tenants) => Box::new(tenants.iter().flat_map(move |t| {
            m.range(K::least(t)..)
                .take_while(move |(k, _)| k.tenant() == t.as_str())
        })),
    }
}

/// The members of `set` of the tenants in `scope` (every member without one).
fn of_tenants_set<'a, K: OfTenant>(
    set: &'a BTreeSet<K>,
    scope: Option<&'a BTreeSet<String>>,
) -> Box<dyn Iterator<Item = &'a K> + 'a> {
    match scope {
        None => Box::new(set.iter()),
        Some(tenants) => Box::new(tenants.iter().flat_map(move |t| {
            set.range(K::least(t)..)
                .take_while(move |k| k.tenant() == t.as_str())
        })),
    }
}

/// The entries of a map keyed by tenant name, of the tenants in `scope`
/// (every entry without one).
fn of_tenants_one<'a, V: Clone>(
    m: &'a crate::desired::PMap<String, V>,
    scope: Option<&'a BTreeSet<String>>,
) -> Box<dyn Iterator<Item = (&'a String, &'a V)> + 'a> {
    match scope {
        None => Box::new(m.iter()),
        Some(tenants) => Box::new(tenants.iter().filter_map(|t| m.get_key_value(t))),
    }
}

/// The key prefixes whose remembered rows a scoped save compares (None: all).
type Prefixes = Option<Vec<Vec<KeyPart>>>;

/// The hash of a row's fields.
fn row_hash(fields: impl Hash) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    fields.hash(&mut h);
    h.finish()
}

/// One save's comparison with the last, made on the remembered rows in
/// place: which rows to write, which to delete. If the save fails, the rows
/// are half updated and the store rewrites everything next time.
struct Diff<'a> {
    rows: &'a mut Tables,
    epoch: u64,
    /// Every row is written (the tables were emptied first).
    full: bool,
}

impl Diff<'_> {
    /// Records row `key` of `table` with hash `h`; true if it must be
    /// written (new, changed, or every row on a full rewrite).
    fn changed(&mut self, table: &'static str, key: Vec<KeyPart>, h: u64) -> bool {
        let rows = self.rows.entry(table).or_default();
        match rows.get_mut(&key) {
            Some(r) => {
                let same = !self.full && r.hash == h;
                *r = Row {
                    hash: h,
                    seen: self.epoch,
                };
                !same
            }
            None => {
                rows.insert(
                    key,
                    Row {
                        hash: h,
                        seen: self.epoch,
                    },
                );
                true
            }
        }
    }

    /// Deletes, with `sql` (its parameters the key's parts), the rows of
    /// `table` the last save wrote that this one does not have (of those
    /// starting with one of `prefixes`, if given: the only rows a scoped
    /// save looked at).
    fn delete_gone(
        &mut self,
        tx: &Transaction<'_>,
        table: &'static str,
        sql: &str,
        prefixes: &Prefixes,
    ) -> Result<(), StoreError> {
        let Some(rows) = self.rows.get_mut(table) else {
            return Ok(());
        };
        let epoch = self.epoch;
        let gone: Vec<Vec<KeyPart>> = match prefixes {
            None => rows
                .iter()
                .filter(|(_, r)| r.seen != epoch)
                .map(|(k, _)| k.clone())
                .collect(),
            Some(prefixes) => prefixes
                .iter()
                .flat_map(|p| {
                    rows.range(p.clone()..)
                        .take_while(move |(k, _)| k.starts_with(p))
                        .filter(|(_, r)| r.seen != epoch)
                        .map(|(k, _)| k.clone())
                })
                .collect(),
        };
        for key in gone {
            // A full rewrite emptied the table first.
            if !self.full {
                tx.prepare_cached(sql)?
                    .execute(rusqlite::params_from_iter(key.iter()))?;
            }
            rows.remove(&key);
        }
        Ok(())
    }
}

fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(what.to_string())
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`; `:memory:` keeps it in
    /// memory, for tests.
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let open = |source| StoreError::Open {
            path: path.display().to_string(),
            source,
        };
        let conn = if path.as_os_str() == ":memory:" {
            Connection::open_in_memory().map_err(open)?
        } else {
            Connection::open(path).map_err(open)?
        };
        // WAL with synchronous=NORMAL: a commit costs no fsync, so failovers are
        // not held up by the disk. A power loss may lose the last commits (never
        // corrupt the file); versions an agent runs beyond the stored ones are
        // handled by the heartbeat (the controller moves past them).
        if path.as_os_str() != ":memory:" {
            conn.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;")
                .map_err(open)?;
        }
        conn.execute_batch(SCHEMA).map_err(open)?;
        // Every save runs the same few statements once per row: parsing each
        // again cost 12% of the controller's time in `sluice bench fleet`.
        conn.set_prepared_statement_cache_capacity(64);
        Ok(SqliteStore {
            conn,
            written: BTreeMap::new(),
            rows: Tables::default(),
            epoch: 0,
            full: true,
        })
    }

    /// Loads the desired state and every host's last configuration. Tenant specs
    /// are parsed again (checked against `registry` if given).
    pub fn load(
        &self,
        registry: Option<&sluice_chain::Registry>,
    ) -> Result<(Desired, BTreeMap<u32, AgentConfig>), StoreError> {
        let mut d = Desired {
            next_vni: self
                .conn
                .query_row("SELECT value FROM meta WHERE key = 'next_vni'", [], |r| {
                    r.get::<_, i64>(0)
                })
                .map(|v| v as u32)
                .or_else(|e| match e {
                    rusqlite::Error::QueryReturnedNoRows => Ok(1),
                    e => Err(e),
                })?,
            ..Desired::default()
        };
        let mut st = self
            .conn
            .prepare("SELECT name, yaml, vni, generation FROM tenants")?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, i64>(3)?,
            ))
        })?;
        for row in rows {
            let (name, yaml, vni, generation) = row?;
            let spec = TenantSpec::parse(&yaml, &format!("stored tenant {name}"), registry)
                .map_err(corrupt)?;
            d.tenants.insert(
                name.clone(),
                std::sync::Arc::new(Tenant {
                    name,
                    yaml,
                    spec,
                    vni: vni as u32,
                    generation: generation as u64,
                }),
            );
        }
        let mut st = self
            .conn
            .prepare("SELECT id, name, underlay, api FROM hosts")?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
            ))
        })?;
        for row in rows {
            let (id, name, underlay, api) = row?;
            let underlay = underlay
                .parse()
                .map_err(|_| corrupt(format!("host {id}: bad underlay `{underlay}`")))?;
            d.hosts.insert(
                id as u32,
                Host {
                    id: id as u32,
                    name,
                    underlay,
                    api,
                    capacity: None,
                },
            );
        }
        // A table of its own (JSON), so databases from before capacities
        // need no migration.
        let mut st = self
            .conn
            .prepare("SELECT host, capacity FROM host_capacity")?;
        let rows = st.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))?;
        for row in rows {
            let (id, text) = row?;
            let c = serde_json::from_str(&text)
                .map_err(|e| corrupt(format!("capacity of host {id}: {e}")))?;
            if let Some(h) = d.hosts.get_mut(&(id as u32)) {
                h.capacity = Some(c);
            }
        }
        let mut st = self
            .conn
            .prepare("SELECT tenant, name, host, iface, mac, addr, gateway, port FROM vms")?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, String>(5)?,
                r.get::<_, bool>(6)?,
                r.get::<_, i64>(7)?,
            ))
        })?;
        for row in rows {
            let (tenant, name, host, iface, mac, addr, gateway, port) = row?;
            let addr = addr
                .parse()
                .map_err(|_| corrupt(format!("vm {tenant}/{name}: bad addr `{addr}`")))?;
            d.vms.insert(
                (tenant.clone(), name.clone()),
                Vm {
                    reg: VmRegistration {
                        tenant,
                        name,
                        host: host as u32,
                        iface,
                        mac,
                        addr,
                        gateway,
                    },
                    port: port as u16,
                },
            );
        }
        let mut st = self
            .conn
            .prepare("SELECT tenant, middlebox, idx, host, port FROM instances")?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, i64>(4)?,
            ))
        })?;
        for row in rows {
            let (tenant, mb, idx, host, port) = row?;
            d.instances.insert(
                (tenant, mb, idx as u32),
                Instance {
                    host: host as u32,
                    port: port as u16,
                },
            );
        }
        // A table of its own, so databases from before reasons need no
        // migration (their instances have none).
        let mut st = self
            .conn
            .prepare("SELECT tenant, middlebox, idx, policy, reason FROM placement_why")?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, String>(4)?,
            ))
        })?;
        for row in rows {
            let (tenant, mb, idx, policy, reason) = row?;
            let policy = policy
                .parse()
                .map_err(|e| corrupt(format!("placement of {tenant}/{mb}/{idx}: {e}")))?;
            d.why
                .insert((tenant, mb, idx as u32), Why { policy, reason });
        }
        let mut st = self
            .conn
            .prepare("SELECT tenant, middlebox, count, spec_count FROM scaled")?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, i64>(3)?,
            ))
        })?;
        for row in rows {
            let (tenant, mb, count, spec_count) = row?;
            d.scaled.insert(
                (tenant, mb),
                Scaled {
                    count: count as u32,
                    spec_count: spec_count as u32,
                },
            );
        }
        let mut st = self
            .conn
            .prepare("SELECT tenant, middlebox, idx FROM draining")?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })?;
        for row in rows {
            let (tenant, mb, idx) = row?;
            d.draining.insert((tenant, mb, idx as u32));
        }
        let mut st = self
            .conn
            .prepare("SELECT tenant, middlebox, idx, until_ms FROM instance_drains")?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, i64>(3)?,
            ))
        })?;
        for row in rows {
            let (tenant, mb, idx, until) = row?;
            d.instance_drains
                .insert((tenant, mb, idx as u32), until.max(0) as u64);
        }
        let mut st = self
            .conn
            .prepare("SELECT tenant, middlebox, backend, until_ms FROM backend_drains")?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, i64>(3)?,
            ))
        })?;
        for row in rows {
            let (tenant, mb, backend, until) = row?;
            d.backend_drains
                .insert((tenant, mb, backend), until.max(0) as u64);
        }
        let mut st = self
            .conn
            .prepare("SELECT tenant, chain, config FROM scaling")?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })?;
        for row in rows {
            let (tenant, chain, text) = row?;
            let cfg = serde_json::from_str(&text)
                .map_err(|e| corrupt(format!("scaling of {tenant}/{chain}: {e}")))?;
            d.scaling.insert((tenant, chain), cfg);
        }
        let mut configs = BTreeMap::new();
        let mut st = self
            .conn
            .prepare("SELECT host, version, config FROM host_configs")?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(2)?,
            ))
        })?;
        for row in rows {
            let (host, version, text) = row?;
            let mut cfg: AgentConfig = serde_json::from_str(&text)
                .map_err(|e| corrupt(format!("config of host {host}: {e}")))?;
            cfg.version = version as u64;
            configs.insert(host as u32, cfg);
        }
        d.fabric = load_fabric(&self.conn)?;
        load_blocks(&self.conn, &mut d)?;
        let mut st = self.conn.prepare("SELECT host FROM contained")?;
        let rows = st.query_map([], |r| r.get::<_, i64>(0))?;
        for h in rows {
            d.contained.insert(h? as u32);
        }
        let mut st = self.conn.prepare("SELECT host FROM cordoned")?;
        let rows = st.query_map([], |r| r.get::<_, i64>(0))?;
        for h in rows {
            d.cordoned.insert(h? as u32);
        }
        let mut st = self.conn.prepare("SELECT host, generation FROM pardons")?;
        let rows = st.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))?;
        for row in rows {
            let (h, g) = row?;
            d.pardons.insert(h as u32, g as u64);
        }
        Ok((d, configs))
    }

    /// Replaces the stored state with `d` and `configs`, in one transaction.
    pub fn save(
        &mut self,
        d: &Desired,
        configs: &BTreeMap<u32, AgentConfig>,
    ) -> Result<(), StoreError> {
        self.save_scoped(d, configs, None)
    }

    /// [`SqliteStore::save`] comparing only the rows of what `touched`
    /// names, if given (the rest are as the last save left them: see
    /// [`Touched`]); a store that must rewrite everything ignores it.
    fn save_scoped(
        &mut self,
        d: &Desired,
        configs: &BTreeMap<u32, AgentConfig>,
        touched: Option<&Touched>,
    ) -> Result<(), StoreError> {
        let touched = touched.filter(|_| !self.full);
        let fresh: BTreeMap<u32, &AgentConfig> = match touched {
            None => configs
                .iter()
                .filter(|(h, c)| self.written.get(h) != Some(&c.version))
                .map(|(h, c)| (*h, c))
                .collect(),
            Some(t) => t
                .configs
                .iter()
                .filter_map(|h| configs.get_key_value(h))
                .filter(|(h, c)| self.written.get(h) != Some(&c.version))
                .map(|(h, c)| (*h, c))
                .collect(),
        };
        self.epoch += 1;
        let full = self.full;
        // Until this save commits, the remembered rows are not what the
        // database holds: a failure anywhere leaves a full rewrite to do.
        self.full = true;
        let tx = self.conn.transaction()?;
        let mut diff = Diff {
            rows: &mut self.rows,
            epoch: self.epoch,
            full,
        };
        write_all(&tx, d, &fresh, &mut diff, touched)?;
        tx.commit()?;
        self.full = false;
        // Only once committed: a failed save leaves them to be written again.
        for (h, c) in fresh {
            self.written.insert(h, c.version);
        }
        Ok(())
    }
}

/// The blocks on request and the next block id (a table of its own, so
/// databases from before blocks need no migration).
fn load_blocks(conn: &Connection, d: &mut Desired) -> Result<(), StoreError> {
    d.next_block = conn
        .query_row("SELECT value FROM meta WHERE key = 'next_block'", [], |r| {
            r.get::<_, i64>(0)
        })
        .map(|v| v as u64)
        .or_else(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => Ok(1),
            e => Err(e),
        })?;
    let mut st = conn.prepare("SELECT id, block FROM blocks")?;
    let rows = st.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))?;
    for row in rows {
        let (id, text) = row?;
        let b: crate::blocks::Block =
            serde_json::from_str(&text).map_err(|e| corrupt(format!("block {id}: {e}")))?;
        d.blocks.insert(b.id, b);
    }
    Ok(())
}

/// The fabric's secrets (None: sealing off).
fn load_fabric(conn: &Connection) -> Result<Option<crate::fabric::FabricSecret>, StoreError> {
    let mut st = conn.prepare("SELECT id, secret, sending FROM fabric_secrets ORDER BY rowid")?;
    let rows = st.query_map([], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, Vec<u8>>(1)?,
            r.get::<_, i64>(2)?,
        ))
    })?;
    let mut f = crate::fabric::FabricSecret {
        secrets: Vec::new(),
        sending: 0,
    };
    for row in rows {
        let (id, secret, sending) = row?;
        let id = u8::try_from(id).map_err(|_| corrupt(format!("fabric key id {id}")))?;
        let secret: [u8; 32] = secret
            .try_into()
            .map_err(|_| corrupt(format!("fabric secret {id} is not 32 bytes")))?;
        if sending != 0 {
            f.sending = id;
        }
        f.secrets.push((id, secret));
    }
    if f.secrets.is_empty() {
        return Ok(None);
    }
    if !f.secrets.iter().any(|s| s.0 == f.sending) {
        return Err(corrupt("no fabric secret is marked as sending"));
    }
    Ok(Some(f))
}

/// Writes `d` and `configs` through `diff`: a full rewrite when it has no
/// previous save, else only the rows that changed.
fn write_all(
    tx: &Transaction<'_>,
    d: &Desired,
    configs: &BTreeMap<u32, &AgentConfig>,
    diff: &mut Diff<'_>,
    touched: Option<&Touched>,
) -> Result<(), StoreError> {
    use KeyPart::{I, T};
    // What a scoped save compares: the touched tenants' and hosts' rows.
    let tenants = touched.map(|t| &t.tenants);
    let of_tenant: Prefixes = tenants.map(|ts| ts.iter().map(|t| vec![T(t.clone())]).collect());
    let of_host: Prefixes = touched.map(|t| t.hosts.iter().map(|h| vec![I(*h as i64)]).collect());
    let hosts: Box<dyn Iterator<Item = &Host>> = match touched {
        None => Box::new(d.hosts.values()),
        Some(t) => Box::new(t.hosts.iter().filter_map(|h| d.hosts.get(h))),
    };
    if diff.full {
        tx.execute_batch(
            "DELETE FROM tenants; DELETE FROM hosts; DELETE FROM host_capacity; DELETE FROM vms; DELETE FROM instances;
             DELETE FROM placement_why;
             DELETE FROM scaled; DELETE FROM draining; DELETE FROM scaling;
             DELETE FROM backend_drains; DELETE FROM instance_drains; DELETE FROM blocks;
             DELETE FROM contained;
             DELETE FROM cordoned; DELETE FROM pardons;",
        )?;
    }
    // Few rows, and their order of age (rowid) matters: rewritten whole
    // when any changed.
    let fabric = row_hash(d.fabric.as_ref().map(|f| (&f.secrets, f.sending)));
    if diff.changed("fabric_secrets", Vec::new(), fabric) {
        tx.execute_batch("DELETE FROM fabric_secrets;")?;
        if let Some(f) = &d.fabric {
            // Kept in order of age (rowid), so the newest is known after a reload.
            for (id, secret) in &f.secrets {
                tx.prepare_cached(
                    "INSERT INTO fabric_secrets (id, secret, sending) VALUES (?1, ?2, ?3)",
                )?
                .execute(params![
                    *id as i64,
                    &secret[..],
                    (*id == f.sending) as i64
                ])?;
            }
        }
    }
    tx.prepare_cached("INSERT OR REPLACE INTO meta (key, value) VALUES ('next_vni', ?1)")?
        .execute(params![d.next_vni as i64])?;
    // A tenant's YAML changes only with an apply, which moves its generation:
    // the hash need not read the whole spec. Gone tenants are deleted first,
    // since a VNI is unique.
    let mut changed = Vec::new();
    for (_, t) in of_tenants_one(&d.tenants, tenants) {
        let h = row_hash((&t.name, t.vni, t.generation, t.yaml.len()));
        if diff.changed("tenants", vec![T(t.name.clone())], h) {
            changed.push(t);
        }
    }
    diff.delete_gone(
        tx,
        "tenants",
        "DELETE FROM tenants WHERE name = ?1",
        &of_tenant,
    )?;
    for t in changed {
        tx.prepare_cached(
            "INSERT OR REPLACE INTO tenants (name, yaml, vni, generation) VALUES (?1, ?2, ?3, ?4)",
        )?
        .execute(params![t.name, t.yaml, t.vni as i64, t.generation as i64])?;
    }
    for h in hosts {
        let hh = row_hash((&h.name, h.underlay, &h.api));
        if diff.changed("hosts", vec![I(h.id as i64)], hh) {
            tx.prepare_cached(
                "INSERT OR REPLACE INTO hosts (id, name, underlay, api) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![h.id as i64, h.name, h.underlay.to_string(), h.api])?;
        }
        if let Some(c) = &h.capacity {
            let text = serde_json::to_string(c)
                .map_err(|e| corrupt(format!("capacity of host {}: {e}", h.id)))?;
            if diff.changed("host_capacity", vec![I(h.id as i64)], row_hash(&text)) {
                tx.prepare_cached(
                    "INSERT OR REPLACE INTO host_capacity (host, capacity) VALUES (?1, ?2)",
                )?
                .execute(params![h.id as i64, text])?;
            }
        }
    }
    diff.delete_gone(tx, "hosts", "DELETE FROM hosts WHERE id = ?1", &of_host)?;
    diff.delete_gone(
        tx,
        "host_capacity",
        "DELETE FROM host_capacity WHERE host = ?1",
        &of_host,
    )?;
    for (_, v) in of_tenants_shared(&d.vms, tenants) {
        let r = &v.reg;
        let h = row_hash((
            &r.tenant, &r.name, r.host, &r.iface, &r.mac, r.addr, r.gateway, v.port,
        ));
        if diff.changed("vms", vec![T(r.tenant.clone()), T(r.name.clone())], h) {
            tx.prepare_cached(
                "INSERT OR REPLACE INTO vms (tenant, name, host, iface, mac, addr, gateway, port)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![
                r.tenant,
                r.name,
                r.host as i64,
                r.iface,
                r.mac,
                r.addr.to_string(),
                r.gateway,
                v.port as i64
            ])?;
        }
    }
    diff.delete_gone(
        tx,
        "vms",
        "DELETE FROM vms WHERE tenant = ?1 AND name = ?2",
        &of_tenant,
    )?;
    let mbk = |t: &String, mb: &String, k: u32| vec![T(t.clone()), T(mb.clone()), I(k as i64)];
    for ((t, mb, k), i) in of_tenants_shared(&d.instances, tenants) {
        if diff.changed("instances", mbk(t, mb, *k), row_hash((i.host, i.port))) {
            tx.prepare_cached(
                "INSERT OR REPLACE INTO instances (tenant, middlebox, idx, host, port) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![t, mb, *k as i64, i.host as i64, i.port as i64])?;
        }
    }
    diff.delete_gone(
        tx,
        "instances",
        "DELETE FROM instances WHERE tenant = ?1 AND middlebox = ?2 AND idx = ?3",
        &of_tenant,
    )?;
    for ((t, mb, k), w) in of_tenants_shared(&d.why, tenants) {
        let h = row_hash((w.policy.as_str(), &w.reason));
        if diff.changed("placement_why", mbk(t, mb, *k), h) {
            tx.prepare_cached(
                "INSERT OR REPLACE INTO placement_why (tenant, middlebox, idx, policy, reason) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![t, mb, *k as i64, w.policy.as_str(), w.reason])?;
        }
    }
    diff.delete_gone(
        tx,
        "placement_why",
        "DELETE FROM placement_why WHERE tenant = ?1 AND middlebox = ?2 AND idx = ?3",
        &of_tenant,
    )?;
    for ((t, mb), sc) in of_tenants(&d.scaled, tenants) {
        let key = vec![T(t.clone()), T(mb.clone())];
        if diff.changed("scaled", key, row_hash((sc.count, sc.spec_count))) {
            tx.prepare_cached(
                "INSERT OR REPLACE INTO scaled (tenant, middlebox, count, spec_count) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![t, mb, sc.count as i64, sc.spec_count as i64])?;
        }
    }
    diff.delete_gone(
        tx,
        "scaled",
        "DELETE FROM scaled WHERE tenant = ?1 AND middlebox = ?2",
        &of_tenant,
    )?;
    for (t, mb, k) in of_tenants_set(&d.draining, tenants) {
        if diff.changed("draining", mbk(t, mb, *k), 0) {
            tx.prepare_cached(
                "INSERT OR REPLACE INTO draining (tenant, middlebox, idx) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![t, mb, *k as i64])?;
        }
    }
    diff.delete_gone(
        tx,
        "draining",
        "DELETE FROM draining WHERE tenant = ?1 AND middlebox = ?2 AND idx = ?3",
        &of_tenant,
    )?;
    for ((t, mb, k), until) in of_tenants(&d.instance_drains, tenants) {
        if diff.changed("instance_drains", mbk(t, mb, *k), row_hash(until)) {
            tx.prepare_cached(
                "INSERT OR REPLACE INTO instance_drains (tenant, middlebox, idx, until_ms) \
                 VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![t, mb, *k as i64, *until as i64])?;
        }
    }
    diff.delete_gone(
        tx,
        "instance_drains",
        "DELETE FROM instance_drains WHERE tenant = ?1 AND middlebox = ?2 AND idx = ?3",
        &of_tenant,
    )?;
    for ((t, mb, b), until) in of_tenants(&d.backend_drains, tenants) {
        let key = vec![T(t.clone()), T(mb.clone()), T(b.clone())];
        if diff.changed("backend_drains", key, row_hash(until)) {
            tx.prepare_cached(
                "INSERT OR REPLACE INTO backend_drains (tenant, middlebox, backend, until_ms) \
                 VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![t, mb, b, *until as i64])?;
        }
    }
    diff.delete_gone(
        tx,
        "backend_drains",
        "DELETE FROM backend_drains WHERE tenant = ?1 AND middlebox = ?2 AND backend = ?3",
        &of_tenant,
    )?;
    for ((t, c), cfg) in of_tenants(&d.scaling, tenants) {
        let text = serde_json::to_string(cfg).map_err(corrupt)?;
        let key = vec![T(t.clone()), T(c.clone())];
        if diff.changed("scaling", key, row_hash(&text)) {
            tx.prepare_cached(
                "INSERT OR REPLACE INTO scaling (tenant, chain, config) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![t, c, text])?;
        }
    }
    diff.delete_gone(
        tx,
        "scaling",
        "DELETE FROM scaling WHERE tenant = ?1 AND chain = ?2",
        &of_tenant,
    )?;
    tx.prepare_cached("INSERT OR REPLACE INTO meta (key, value) VALUES ('next_block', ?1)")?
        .execute(params![d.next_block as i64])?;
    for (id, b) in &d.blocks {
        let text = serde_json::to_string(b).map_err(corrupt)?;
        if diff.changed("blocks", vec![I(*id as i64)], row_hash((&b.tenant, &text))) {
            tx.prepare_cached(
                "INSERT OR REPLACE INTO blocks (id, tenant, block) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![*id as i64, b.tenant, text])?;
        }
    }
    diff.delete_gone(tx, "blocks", "DELETE FROM blocks WHERE id = ?1", &None)?;
    for h in &d.contained {
        if diff.changed("contained", vec![I(*h as i64)], 0) {
            tx.prepare_cached("INSERT OR REPLACE INTO contained (host) VALUES (?1)")?
                .execute(params![*h as i64])?;
        }
    }
    diff.delete_gone(
        tx,
        "contained",
        "DELETE FROM contained WHERE host = ?1",
        &None,
    )?;
    for h in &d.cordoned {
        if diff.changed("cordoned", vec![I(*h as i64)], 0) {
            tx.prepare_cached("INSERT OR REPLACE INTO cordoned (host) VALUES (?1)")?
                .execute(params![*h as i64])?;
        }
    }
    diff.delete_gone(
        tx,
        "cordoned",
        "DELETE FROM cordoned WHERE host = ?1",
        &None,
    )?;
    for (h, g) in &d.pardons {
        if diff.changed("pardons", vec![I(*h as i64)], row_hash(g)) {
            tx.prepare_cached("INSERT OR REPLACE INTO pardons (host, generation) VALUES (?1, ?2)")?
                .execute(params![*h as i64, *g as i64])?;
        }
    }
    diff.delete_gone(tx, "pardons", "DELETE FROM pardons WHERE host = ?1", &None)?;
    // Versions must never go back, so configurations are only ever replaced.
    for (h, cfg) in configs {
        let text = serde_json::to_string(cfg).map_err(corrupt)?;
        tx.prepare_cached(
            "INSERT OR REPLACE INTO host_configs (host, version, config) VALUES (?1, ?2, ?3)",
        )?
        .execute(params![*h as i64, cfg.version as i64, text])?;
    }
    Ok(())
}

impl Store for SqliteStore {
    fn load(
        &self,
        registry: Option<&sluice_chain::Registry>,
    ) -> Result<(Desired, BTreeMap<u32, AgentConfig>), StoreError> {
        SqliteStore::load(self, registry)
    }

    fn save(
        &mut self,
        d: &Desired,
        configs: &BTreeMap<u32, AgentConfig>,
    ) -> Result<(), StoreError> {
        SqliteStore::save(self, d, configs)
    }

    fn save_touched(
        &mut self,
        d: &Desired,
        configs: &BTreeMap<u32, AgentConfig>,
        touched: &Touched,
    ) -> Result<(), StoreError> {
        self.save_scoped(d, configs, Some(touched))
    }

    fn append_audit(&mut self, e: &AuditEntry) -> Result<u64, StoreError> {
        let changes = serde_json::to_string(&e.changes).map_err(corrupt)?;
        self.conn.execute(
            "INSERT INTO audit (at_ms, actor, tenant, action, status, changes)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                e.at_ms as i64,
                e.actor,
                e.tenant,
                e.action,
                e.status as i64,
                changes
            ],
        )?;
        Ok(self.conn.last_insert_rowid() as u64)
    }

    fn audit(&self, q: &AuditQuery) -> Result<Vec<AuditEntry>, StoreError> {
        // The newest `limit` of the selected entries, returned oldest first.
        let mut st = self.conn.prepare(
            "SELECT seq, at_ms, actor, tenant, action, status, changes FROM audit
             WHERE seq > ?1 AND (?2 IS NULL OR tenant = ?2)
             ORDER BY seq DESC LIMIT ?3",
        )?;
        let rows = st.query_map(params![q.since as i64, q.tenant, q.limit() as i64], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, Option<String>>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, i64>(5)?,
                r.get::<_, String>(6)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, at_ms, actor, tenant, action, status, changes) = row?;
            out.push(AuditEntry {
                seq: seq as u64,
                at_ms: at_ms as u64,
                actor,
                tenant,
                action,
                status: status as u16,
                changes: serde_json::from_str(&changes).map_err(corrupt)?,
            });
        }
        out.reverse();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desired::versioned;

    #[test]
    fn the_audit_log_survives_a_restart_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let entry = |i: u64, tenant: &str| AuditEntry {
            seq: 0,
            at_ms: 1000 + i,
            actor: format!("op{i}"),
            tenant: Some(tenant.to_string()),
            action: format!("apply tenant {tenant}"),
            status: 200,
            changes: vec![format!("+ chain c{i}")],
        };
        {
            let mut s = SqliteStore::open(&path).unwrap();
            for i in 0..5 {
                let seq = s
                    .append_audit(&entry(i, if i % 2 == 0 { "a" } else { "b" }))
                    .unwrap();
                assert_eq!(seq, i + 1);
            }
        }
        let s = SqliteStore::open(&path).unwrap();
        let all = s.audit(&AuditQuery::default()).unwrap();
        assert_eq!(
            all.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [1, 2, 3, 4, 5]
        );
        assert_eq!(
            all[3],
            AuditEntry {
                seq: 4,
                ..entry(3, "b")
            }
        );
        let q = AuditQuery {
            tenant: Some("a".into()),
            since: 1,
            limit: 1,
        };
        assert_eq!(
            s.audit(&q).unwrap(),
            [AuditEntry {
                seq: 5,
                ..entry(4, "a")
            }]
        );
    }

    use super::super::sample::sample;

    #[test]
    fn state_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let (d, reg) = sample();
        let mut cfgs = d.configs("local").unwrap();
        versioned(&BTreeMap::new(), &mut cfgs);
        {
            let mut db = SqliteStore::open(&path).unwrap();
            db.save(&d, &cfgs).unwrap();
        }
        let db = SqliteStore::open(&path).unwrap();
        let (d2, c2) = db.load(Some(&reg)).unwrap();
        assert!(!d.why.is_empty(), "placement reasons are kept");
        assert_eq!(d2.why, d.why);
        assert_eq!(
            d2.hosts[&2].capacity.as_ref().unwrap().rack.as_deref(),
            Some("r2")
        );
        assert!(
            d2.contained.contains(&2),
            "a contained host stays contained"
        );
        assert!(d2.cordoned.contains(&1), "a drained host stays drained");
        assert_eq!(d2, d);
        assert_eq!(c2, cfgs);

        // Saves that change one host's configuration (writing only it) still
        // leave every host's latest configuration to load.
        let mut db = db;
        db.save(&d, &cfgs).unwrap();
        let h = *cfgs.keys().next().unwrap();
        let mut newer = cfgs.clone();
        let c = newer.get_mut(&h).unwrap();
        c.version += 1;
        c.ports.clear();
        db.save(&d, &newer).unwrap();
        drop(db);
        let (_, c3) = SqliteStore::open(&path).unwrap().load(Some(&reg)).unwrap();
        assert_eq!(c3, newer);
        assert_ne!(c3, cfgs);
    }

    #[test]
    fn saves_write_only_what_changed_and_reload_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let (mut d, reg) = sample();
        let cfgs = BTreeMap::new();
        let mut db = SqliteStore::open(&path).unwrap();
        // A database with a row nothing in memory knows: the first save
        // after opening rewrites every table, so it goes.
        db.conn
            .execute("INSERT INTO contained (host) VALUES (99)", [])
            .unwrap();
        db.save(&d, &cfgs).unwrap();
        let n = db.conn.total_changes();
        assert!(n >= 25, "the first save writes every row: {n}");
        // The same state again: only the two counters in `meta`.
        db.save(&d, &cfgs).unwrap();
        assert_eq!(db.conn.total_changes() - n, 2);
        // One VM more: its row, and the counters.
        let n = db.conn.total_changes();
        d.register_vm(VmRegistration {
            tenant: "acme".into(),
            name: "web-a3".into(),
            host: 2,
            iface: "if-web-a3".into(),
            mac: "02:00:00:00:00:0a".into(),
            addr: "10.10.1.13".parse().unwrap(),
            gateway: false,
        })
        .unwrap();
        db.save(&d, &cfgs).unwrap();
        assert_eq!(db.conn.total_changes() - n, 3);
        // Changes, additions and removals in several tables.
        d.contained.clear();
        d.pardons.insert(3, 7);
        d.instance_drains.clear();
        d.backend_drains.clear();
        d.backend_drains.insert(
            ("acme".into(), "lb-b".into(), "10.10.2.11".into()),
            1_800_000_000_000,
        );
        let k = d.instances.keys().next().unwrap().clone();
        let mut i = d.instances[&k];
        i.port += 100;
        d.instances.insert(k, i);
        d.vms.retain(|(_, n), _| n != "web-b2");
        db.save(&d, &cfgs).unwrap();
        drop(db);
        let (loaded, _) = SqliteStore::open(&path).unwrap().load(Some(&reg)).unwrap();
        assert!(!loaded.contained.contains(&99), "the stray row is gone");
        assert_eq!(loaded, d);
        // A failed save is rolled back and remembered as not made: the next
        // one writes what it could not.
        let mut db = SqliteStore::open(&path).unwrap();
        db.save(&d, &cfgs).unwrap();
        db.conn
            .execute_batch("CREATE TRIGGER no_vms BEFORE INSERT ON vms BEGIN SELECT RAISE(ABORT, 'refused'); END;")
            .unwrap();
        d.vms.retain(|(_, n), _| n != "web-a3");
        d.pardons.insert(4, 1);
        d.register_vm(VmRegistration {
            tenant: "acme".into(),
            name: "web-b3".into(),
            host: 1,
            iface: "if-web-b3".into(),
            mac: "02:00:00:00:00:0b".into(),
            addr: "10.10.2.13".parse().unwrap(),
            gateway: false,
        })
        .unwrap();
        assert!(db.save(&d, &cfgs).is_err());
        db.conn.execute_batch("DROP TRIGGER no_vms;").unwrap();
        db.save(&d, &cfgs).unwrap();
        drop(db);
        let (loaded, _) = SqliteStore::open(&path).unwrap().load(Some(&reg)).unwrap();
        assert_eq!(loaded, d);
    }

    #[test]
    fn a_save_told_what_changed_compares_and_writes_only_those_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let (mut d, reg) = sample();
        let mut cfgs = BTreeMap::new();
        let mut db = SqliteStore::open(&path).unwrap();
        // The first save after opening rewrites everything, told or not.
        let told = |tenants: &[&str], hosts: &[u32], configs: &[u32]| Touched {
            tenants: tenants.iter().map(|t| t.to_string()).collect(),
            hosts: hosts.iter().copied().collect(),
            configs: configs.iter().copied().collect(),
        };
        db.save_touched(&d, &cfgs, &told(&[], &[], &[])).unwrap();
        assert!(db.conn.total_changes() >= 25);
        // A new host (and its configuration): its row, its capacity, its
        // configuration and the two counters.
        let n = db.conn.total_changes();
        d.hosts.insert(
            3,
            Host {
                id: 3,
                name: "h3".into(),
                underlay: std::net::Ipv4Addr::new(10, 255, 0, 3),
                api: "http://127.0.0.1:3".into(),
                capacity: Some(sluice_proto::HostCapacity::default()),
            },
        );
        cfgs.insert(
            3,
            AgentConfig {
                version: 1,
                host: 3,
                ..AgentConfig::default()
            },
        );
        db.save_touched(&d, &cfgs, &told(&[], &[3], &[3])).unwrap();
        assert_eq!(db.conn.total_changes() - n, 5);
        // A tenant's VM gone and another moved: their rows, the counters.
        let n = db.conn.total_changes();
        d.vms.retain(|(_, n), _| n != "web-b2");
        let k = ("acme".to_string(), "web-a2".to_string());
        let mut v = d.vms[&k].clone();
        v.reg.host = 3;
        d.vms.insert(k, v);
        db.save_touched(&d, &cfgs, &told(&["acme"], &[], &[]))
            .unwrap();
        assert_eq!(db.conn.total_changes() - n, 4);
        // A host gone and the tenant deleted, told: every row of them goes.
        d.hosts.remove(&3);
        cfgs.remove(&3);
        d.remove_tenant("acme");
        d.vms.clear();
        db.save_touched(&d, &cfgs, &told(&["acme"], &[3], &[3]))
            .unwrap();
        drop(db);
        let (loaded, _) = SqliteStore::open(&path).unwrap().load(Some(&reg)).unwrap();
        assert_eq!(loaded, d);
        assert!(!loaded.hosts.contains_key(&3));
        assert!(loaded.tenants.is_empty() && loaded.instances.is_empty());
    }
}
