//! `/v1/alerts` and `/v1/flows`: the EVE alerts and flow records of deployed
//! NF instances, gathered from every agent (the HTTP edge asks them; this
//! module parses the request and merges the answers).

use serde_json::Value;

use super::{percent_decode, percent_encode};
use crate::error::ApiError;

/// `GET /v1/alerts` or `/v1/flows` with `?tenant=T&since=TS&limit=N`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EveRequest {
    /// `alert` or `flow`.
    pub event_type: &'static str,
    /// Only this tenant's.
    pub tenant: Option<String>,
    /// Only events later than this EVE timestamp.
    pub since: Option<String>,
    /// At most this many, the newest (1000 if 0).
    pub limit: usize,
}

impl EveRequest {
    /// The query each agent is sent (`GET {api}/v1/eve?...`).
    pub fn agent_query(&self) -> String {
        let mut q = format!("event_type={}", self.event_type);
        if let Some(t) = &self.tenant {
            q.push_str(&format!("&tenant={}", percent_encode(t)));
        }
        if let Some(s) = &self.since {
            q.push_str(&format!("&since={}", percent_encode(s)));
        }
        q.push_str(&format!("&limit={}", self.limit()));
        q
    }

    /// The limit in effect.
    pub fn limit(&self) -> usize {
        if self.limit == 0 {
            1000
        } else {
            self.limit.min(100_000)
        }
    }
}

/// Parses the query of `GET /v1/alerts` (`event_type` `alert`) or `/v1/flows`.
pub fn parse(event_type: &'static str, query: &str) -> Result<EveRequest, ApiError> {
    let mut r = EveRequest {
        event_type,
        ..EveRequest::default()
    };
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        match k {
            "tenant" => r.tenant = Some(percent_decode(v)),
            "since" => r.since = Some(percent_decode(v)),
            "limit" => {
                r.limit = v
                    .parse()
                    .map_err(|_| ApiError::bad(format!("limit: `{v}` is not a number")))?
            }
            _ => {
                return Err(ApiError::bad(format!(
                    "`{k}`: unknown query parameter (known: tenant, since, limit)"
                )))
            }
        }
    }
    Ok(r)
}

/// The agents' answers as one list, oldest first, the newest `limit` of them.
/// The same event reported twice (by two instances that handled one flow, or
/// read twice from a rotating file) appears once: events equal but for the
/// reporting instance (`host`) are duplicates.
pub fn merge(answers: Vec<Vec<Value>>, limit: usize) -> Vec<Value> {
    let mut all: Vec<(String, Value)> = answers
        .into_iter()
        .flatten()
        .map(|v| {
            let mut key = v.clone();
            if let Value::Object(m) = &mut key {
                m.remove("host");
            }
            (key.to_string(), v)
        })
        .collect();
    let ts = |v: &Value| {
        v.get("timestamp")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    all.sort_by(|a, b| ts(&a.1).cmp(&ts(&b.1)).then_with(|| a.0.cmp(&b.0)));
    all.dedup_by(|a, b| a.0 == b.0);
    let skip = all.len().saturating_sub(limit);
    all.into_iter().skip(skip).map(|(_, v)| v).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn answers_merge_in_time_order_without_duplicates() {
        let a = json!({"timestamp": "t2", "flow_id": 7, "alert": {"signature_id": 1}, "host": "acme/ips/0"});
        let same_elsewhere = json!({"timestamp": "t2", "flow_id": 7, "alert": {"signature_id": 1}, "host": "acme/ips/1"});
        let b = json!({"timestamp": "t1", "flow_id": 8, "host": "acme/ips/0"});
        let c = json!({"timestamp": "t3", "flow_id": 9, "host": "acme/ips/1"});
        let got = merge(
            vec![vec![a.clone(), b.clone()], vec![same_elsewhere, c.clone()]],
            10,
        );
        assert_eq!(got, [b, a.clone(), c.clone()]);
        let got = merge(vec![vec![a.clone()], vec![c.clone()]], 1);
        assert_eq!(got, [c]);
    }

    #[test]
    fn queries_parse_and_are_passed_on_encoded() {
        let r = parse("alert", "tenant=ac%20me&since=2026-01-01T00:00:00&limit=5").unwrap();
        assert_eq!(r.tenant.as_deref(), Some("ac me"));
        assert_eq!(
            r.agent_query(),
            "event_type=alert&tenant=ac%20me&since=2026-01-01T00%3A00%3A00&limit=5"
        );
        assert_eq!(parse("flow", "limit=x").unwrap_err().status, 400);
        assert_eq!(parse("flow", "sid=1").unwrap_err().status, 400);
    }
}
