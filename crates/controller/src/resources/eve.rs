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
    /// `follow=true`: answer with a `text/event-stream` that sends these
    /// events and then every new one as it arrives.
    pub follow: bool,
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

    /// For flow records, the query of the alerts that mark them `alerted`
    /// ([`mark_alerted`]): the same tenant, any time (an alert comes before
    /// the end of its flow, so before a `since` that selects the record), the
    /// newest 100,000. `None` for alerts.
    pub fn alerts_query(&self) -> Option<String> {
        if self.event_type != "flow" {
            return None;
        }
        let mut q = "event_type=alert".to_string();
        if let Some(t) = &self.tenant {
            q.push_str(&format!("&tenant={}", percent_encode(t)));
        }
        q.push_str("&limit=100000");
        Some(q)
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
            "follow" => {
                r.follow = match v {
                    "true" | "1" | "" => true,
                    "false" | "0" => false,
                    _ => {
                        return Err(ApiError::bad(format!(
                            "follow: `{v}` is neither true nor false"
                        )))
                    }
                }
            }
            _ => {
                return Err(ApiError::bad(format!(
                    "`{k}`: unknown query parameter (known: tenant, since, limit, follow)"
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

/// Sets `flow.alerted` on every flow record of `flows` for which `alerts`
/// hold an alert of the same tenant and `flow_id`.
///
/// Done here, where every agent's events meet, rather than by the monitor:
/// the monitor that writes a flow's record is in general another instance,
/// often on another host, than the IPS that alerted on it (Figure 4's
/// monitor is a mirror of the chain its IPS is in), and neither shares
/// state with the other. The `flow_id` is equal on every instance that
/// sees the flow (the same 5-tuple in the same virtual network), so the
/// join needs nothing else; a flow whose addresses a NAT or LB rewrote
/// between the IPS and the monitor has another id there and is not marked.
pub fn mark_alerted(flows: &mut [Value], alerts: &[Value]) {
    let key = |v: &Value| {
        let id = v.get("flow_id").and_then(Value::as_u64)?;
        let tenant = v.get("tenant").and_then(Value::as_str).unwrap_or("");
        Some((tenant.to_string(), id))
    };
    let alerted: std::collections::HashSet<(String, u64)> = alerts
        .iter()
        .filter(|a| a.get("event_type").and_then(Value::as_str) == Some("alert"))
        .filter_map(key)
        .collect();
    for f in flows {
        if key(f).is_some_and(|k| alerted.contains(&k)) {
            if let Some(Value::Object(m)) = f.get_mut("flow") {
                m.insert("alerted".into(), true.into());
            }
        }
    }
}

/// What a follow stream has sent, so that it can ask again from a little
/// before its newest event: an agent may report an event late (its instance
/// wrote the line after another host's newer one was read), and two events
/// may share a timestamp. The stream asks `since` the oldest of the last
/// [`StreamCursor::REMEMBERED`] events it sent and sends only what it has not
/// sent, so a late event with a timestamp in that span is still sent, once.
#[derive(Debug, Default)]
pub struct StreamCursor {
    /// Sent events: (timestamp, hash of the record), oldest first.
    sent: std::collections::BTreeSet<(String, u64)>,
}

impl StreamCursor {
    /// How many sent events are remembered (how far back a late event is
    /// still caught, and how many events each poll asks for again).
    pub const REMEMBERED: usize = 256;

    /// The `since` to ask with: the oldest remembered event's timestamp.
    pub fn since(&self) -> Option<&str> {
        self.sent.first().map(|(ts, _)| ts.as_str())
    }

    /// The events of `answer` not sent yet, in order; remembers them.
    pub fn unsent(&mut self, answer: Vec<Value>) -> Vec<Value> {
        use std::hash::{Hash, Hasher};
        let mut out = Vec::new();
        for e in answer {
            let ts = e
                .get("timestamp")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let mut h = std::collections::hash_map::DefaultHasher::new();
            e.to_string().hash(&mut h);
            if self.sent.insert((ts, h.finish())) {
                out.push(e);
            }
        }
        while self.sent.len() > Self::REMEMBERED {
            self.sent.pop_first();
        }
        out
    }
}

/// Appends `e` to `out` as one Server-Sent Event: `event:` its EVE
/// `event_type`, `id:` its timestamp (what `since` takes to resume after
/// it), `data:` the record as one line of JSON (JSON text never holds a raw
/// newline, so one `data:` line always carries it whole).
pub fn sse_frame(out: &mut String, e: &Value) {
    use std::fmt::Write;
    let field = |k: &str| {
        e.get(k)
            .and_then(Value::as_str)
            .filter(|v| !v.contains(['\n', '\r']))
            .unwrap_or("")
    };
    let kind = field("event_type");
    if !kind.is_empty() {
        let _ = writeln!(out, "event: {kind}");
    }
    let ts = field("timestamp");
    if !ts.is_empty() {
        let _ = writeln!(out, "id: {ts}");
    }
    let _ = write!(out, "data: {e}\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_stream_sends_late_and_same_timestamp_events_once() {
        let mut c = StreamCursor::default();
        let e = |ts: &str, id: u64| json!({"timestamp": ts, "flow_id": id});
        assert_eq!(c.unsent(vec![e("t1", 1), e("t3", 3)]).len(), 2);
        assert_eq!(c.since(), Some("t1"));
        // Asked again from t1: what was sent is not sent again; a late t2
        // and another event at t3 are.
        let again = c.unsent(vec![e("t1", 1), e("t2", 2), e("t3", 3), e("t3", 4)]);
        assert_eq!(again, vec![e("t2", 2), e("t3", 4)]);
        // The memory is bounded; the oldest go first.
        let many: Vec<Value> = (0..300).map(|i| e(&format!("u{i:03}"), i)).collect();
        assert_eq!(c.unsent(many).len(), 300);
        assert_eq!(c.since(), Some("u044"));
    }

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
    fn flows_of_the_tenant_with_an_alert_of_their_id_are_marked_alerted() {
        let flow = |tenant: &str, id: u64| {
            json!({"event_type": "flow", "tenant": tenant, "flow_id": id,
                   "flow": {"bytes_toserver": 1, "alerted": false}})
        };
        let mut flows = vec![flow("acme", 7), flow("acme", 8), flow("beta", 7)];
        let alerts = [
            json!({"event_type": "alert", "tenant": "acme", "flow_id": 7}),
            // Another tenant's id, or an event that is not an alert, marks nothing.
            json!({"event_type": "alert", "tenant": "gamma", "flow_id": 8}),
            json!({"event_type": "flow", "tenant": "acme", "flow_id": 8}),
        ];
        mark_alerted(&mut flows, &alerts);
        let marked: Vec<bool> = flows
            .iter()
            .map(|f| f["flow"]["alerted"].as_bool().unwrap())
            .collect();
        assert_eq!(marked, [true, false, false]);
        assert_eq!(flows[0]["flow"]["bytes_toserver"], 1);
        let q = parse("flow", "tenant=acme&since=2026-01-01&limit=5").unwrap();
        assert_eq!(
            q.alerts_query().as_deref(),
            Some("event_type=alert&tenant=acme&limit=100000")
        );
        assert_eq!(parse("alert", "").unwrap().alerts_query(), None);
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
        assert!(!r.follow);
        assert!(parse("alert", "follow=true").unwrap().follow);
        assert!(parse("alert", "follow").unwrap().follow);
        assert!(!parse("alert", "follow=0").unwrap().follow);
        let e = parse("alert", "follow=yes").unwrap_err();
        assert!(e.status == 400 && e.msg.contains("follow"), "{}", e.msg);
    }

    #[test]
    fn an_event_is_one_server_sent_event_with_its_type_and_timestamp() {
        let e = json!({"timestamp": "2026-11-28T10:00:00.000001+0000", "event_type": "alert",
                       "tenant": "acme", "alert": {"signature": "two\nlines"}});
        let mut out = String::new();
        sse_frame(&mut out, &e);
        let (head, data) = out.split_once("data: ").unwrap();
        assert_eq!(head, "event: alert\nid: 2026-11-28T10:00:00.000001+0000\n");
        assert!(
            data.ends_with("\n\n") && data.matches('\n').count() == 2,
            "{out:?}"
        );
        let back: Value = serde_json::from_str(data.trim_end()).unwrap();
        assert_eq!(back, e);
        // Fields that would break the framing are left out, never sent raw.
        let mut out = String::new();
        sse_frame(&mut out, &json!({"event_type": "a\nid: x", "flow_id": 1}));
        assert_eq!(
            out,
            "data: {\"event_type\":\"a\\nid: x\",\"flow_id\":1}\n\n"
        );
    }
}
