//! `/v1/events`: the event log, after an id and of a kind.

use super::{json, percent_decode, Reply};
use crate::error::ApiError;
use crate::model::EventInfo;
use crate::reconcile::Reconciler;

/// `GET /v1/events?since=ID&kind=KIND`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventsQuery {
    /// Only events after this id.
    pub since: u64,
    /// Only events of this kind.
    pub kind: Option<String>,
}

/// Parses the query string.
pub fn parse(query: &str) -> Result<EventsQuery, ApiError> {
    let mut q = EventsQuery::default();
    for kv in query.split('&') {
        match kv.split_once('=') {
            Some(("since", v)) => {
                q.since = v
                    .parse()
                    .map_err(|_| ApiError::bad(format!("since: `{v}` is not an event id")))?
            }
            Some(("kind", v)) => q.kind = Some(percent_decode(v)),
            _ => {}
        }
    }
    Ok(q)
}

/// The events the query selects.
pub fn execute(r: &Reconciler, q: &EventsQuery) -> Result<Reply, ApiError> {
    let v: Vec<&EventInfo> = r.events().since(q.since, q.kind.as_deref()).collect();
    json(200, &v)
}
