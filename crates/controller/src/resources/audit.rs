//! `/v1/audit`: the log of change requests, after a sequence number, of a
//! tenant, at most a number of them.

use super::{json, percent_decode, Reply};
use crate::audit::AuditQuery;
use crate::error::ApiError;
use crate::reconcile::Reconciler;

/// Parses `?since=N&tenant=NAME&limit=N`.
pub fn parse(query: &str) -> Result<AuditQuery, ApiError> {
    let mut q = AuditQuery::default();
    let num = |name: &str, v: &str| {
        v.parse::<u64>()
            .map_err(|_| ApiError::bad(format!("{name}: `{v}` is not a number")))
    };
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        match kv.split_once('=') {
            Some(("since", v)) => q.since = num("since", v)?,
            Some(("limit", v)) => q.limit = num("limit", v)? as usize,
            Some(("tenant", v)) => q.tenant = Some(percent_decode(v)),
            _ => {
                return Err(ApiError::bad(format!(
                    "`{kv}`: unknown query parameter (known: since, tenant, limit)"
                )))
            }
        }
    }
    Ok(q)
}

/// The entries the query selects, oldest first.
pub fn execute(r: &Reconciler, q: &AuditQuery) -> Result<Reply, ApiError> {
    json(200, &r.audit(q)?)
}
