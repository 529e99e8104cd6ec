//! The audit log: every change requested of the controller — who asked (the
//! credential's name), what, when, the answer's status and what it changed —
//! appended to the controller's store in the transaction's order and listed by
//! `GET /v1/audit` (`sluice audit`). Entries are never rewritten or deleted by
//! the API.

use serde::{Deserialize, Serialize};

/// One change request, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Position in the log (from 1), assigned by the store.
    pub seq: u64,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// Who: the name of the credential the request carried (`anonymous` without
    /// one).
    pub actor: String,
    /// The tenant concerned, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// What was asked, e.g. `apply tenant acme`, `delete vm acme/web`.
    pub action: String,
    /// The HTTP status of the answer (a refused change is recorded too).
    pub status: u16,
    /// What it changed (empty when nothing did), or why it was refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<String>,
}

/// Which entries `GET /v1/audit` lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditQuery {
    /// Only entries after this sequence number.
    pub since: u64,
    /// Only entries of this tenant.
    pub tenant: Option<String>,
    /// At most this many (the newest), 1000 if 0.
    pub limit: usize,
}

impl AuditQuery {
    /// The limit in effect.
    pub fn limit(&self) -> usize {
        if self.limit == 0 {
            1000
        } else {
            self.limit.min(10_000)
        }
    }

    /// Whether `e` is listed.
    pub fn matches(&self, e: &AuditEntry) -> bool {
        e.seq > self.since
            && self
                .tenant
                .as_ref()
                .is_none_or(|t| e.tenant.as_ref() == Some(t))
    }
}
