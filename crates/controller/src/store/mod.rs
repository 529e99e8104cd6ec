//! Where the desired state is kept between restarts, behind the [`Store`] trait:
//! the reconciler persists every committed change through it before the change
//! takes effect, and a starting controller loads from it.
//!
//! [`SqliteStore`] is the durable backend of a single controller (a local
//! file); [`EtcdStore`] is the replicated one, shared by several controllers
//! of which one leads (`crate::leader`). [`MemoryStore`] keeps
//! the state in the process, for `--db :memory:`-like ephemeral runs and for the
//! reconciler's deterministic tests.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use sluice_proto::AgentConfig;

use crate::audit::{AuditEntry, AuditQuery};
use crate::desired::Desired;

pub mod etcd;
#[cfg(test)]
mod sample;
mod sqlite;
pub mod tokens;

pub use etcd::EtcdStore;
pub use sqlite::SqliteStore;
pub use tokens::TokenStore;

/// The desired state could not be loaded or saved.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite refused.
    #[error("database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The database file could not be opened.
    #[error("database {path}: {source}")]
    Open {
        /// The file.
        path: String,
        /// Why.
        source: rusqlite::Error,
    },
    /// A stored row does not make sense (edited by hand, or from another version).
    #[error("database: {0}")]
    Corrupt(String),
    /// etcd could not be reached or refused.
    #[error("etcd: {0}")]
    Etcd(#[from] sluice_etcd::EtcdError),
    /// The write was refused because another controller leads now: this one
    /// lost its lease (paused, or cut off from etcd) and must not decide.
    #[error("this controller no longer leads (another controller holds the leader key); the change was not stored")]
    NotLeader,
}

/// A durable home for the desired state and the configuration last derived for
/// each host (so versions keep increasing across restarts).
pub trait Store: Send {
    /// The stored desired state and every host's last configuration; tenant
    /// specs are parsed again (checked against `registry` if given).
    fn load(
        &self,
        registry: Option<&sluice_chain::Registry>,
    ) -> Result<(Desired, BTreeMap<u32, AgentConfig>), StoreError>;

    /// Replaces the stored state with `d` and `configs` atomically: after a crash
    /// the store holds either the state before or the state after.
    fn save(&mut self, d: &Desired, configs: &BTreeMap<u32, AgentConfig>)
        -> Result<(), StoreError>;

    /// [`Store::save`] of a change known to have touched only the rows of
    /// `touched`: a store may then compare and write those rows only, not
    /// every row of the fleet. The result must be what `save` would store.
    fn save_touched(
        &mut self,
        d: &Desired,
        configs: &BTreeMap<u32, AgentConfig>,
        touched: &Touched,
    ) -> Result<(), StoreError> {
        let _ = touched;
        self.save(d, configs)
    }

    /// Appends `e` to the audit log, numbering it (its `seq` is ignored);
    /// returns the number given.
    fn append_audit(&mut self, e: &AuditEntry) -> Result<u64, StoreError>;

    /// The entries `q` selects, oldest first (the newest `q.limit()` of them).
    fn audit(&self, q: &AuditQuery) -> Result<Vec<AuditEntry>, StoreError>;
}

/// What a change touched, for [`Store::save_touched`]: every stored row
/// of the desired state outside these tenants and hosts is as the last save
/// left it, and only these hosts' configurations may have new versions.
/// The small tables (blocks, contained, cordoned and pardoned hosts, the
/// fabric's secrets, the counters) are compared whole anyway.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Touched {
    /// Tenants whose rows (spec, VMs, instances, placement reasons, scaling,
    /// drains) may have changed.
    pub tenants: BTreeSet<String>,
    /// Hosts whose registration (row and capacity) may have changed.
    pub hosts: BTreeSet<u32>,
    /// Hosts whose configuration may have a new version.
    pub configs: BTreeSet<u32>,
}

/// The stored state of a [`MemoryStore`].
type Saved = (Desired, BTreeMap<u32, AgentConfig>);

/// A store in the process's memory. Clones share one state, so a test can
/// "restart" a reconciler on what the previous one saved.
#[derive(Clone, Default)]
pub struct MemoryStore {
    saved: Arc<Mutex<Option<Saved>>>,
    saves: Arc<Mutex<u64>>,
    audit: Arc<Mutex<Vec<AuditEntry>>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// How many times state was saved.
    pub fn saves(&self) -> u64 {
        *self.saves.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The last saved state, if any.
    pub fn saved(&self) -> Option<Saved> {
        self.saved.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Store for MemoryStore {
    fn load(
        &self,
        _registry: Option<&sluice_chain::Registry>,
    ) -> Result<(Desired, BTreeMap<u32, AgentConfig>), StoreError> {
        Ok(self.saved().unwrap_or_else(|| {
            (
                Desired {
                    next_vni: 1,
                    ..Desired::default()
                },
                BTreeMap::new(),
            )
        }))
    }

    fn save(
        &mut self,
        d: &Desired,
        configs: &BTreeMap<u32, AgentConfig>,
    ) -> Result<(), StoreError> {
        *self.saved.lock().unwrap_or_else(|p| p.into_inner()) = Some((d.clone(), configs.clone()));
        *self.saves.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        Ok(())
    }

    fn append_audit(&mut self, e: &AuditEntry) -> Result<u64, StoreError> {
        let mut log = self.audit.lock().unwrap_or_else(|p| p.into_inner());
        let seq = log.len() as u64 + 1;
        log.push(AuditEntry { seq, ..e.clone() });
        Ok(seq)
    }

    fn audit(&self, q: &AuditQuery) -> Result<Vec<AuditEntry>, StoreError> {
        let log = self.audit.lock().unwrap_or_else(|p| p.into_inner());
        let hits: Vec<AuditEntry> = log.iter().filter(|e| q.matches(e)).cloned().collect();
        let skip = hits.len().saturating_sub(q.limit());
        Ok(hits.into_iter().skip(skip).collect())
    }
}
