//! The event log (`GET /v1/events`): a bounded ring of what the controller did
//! and why, with the time each failover's pushes went out.

use std::collections::{BTreeMap, VecDeque};

use crate::model::EventInfo;

/// Events kept (`GET /v1/events`).
pub const EVENTS_KEPT: usize = 10_000;

/// The event log: a bounded ring, plus failovers waiting for their pushes.
#[derive(Default)]
pub struct Events {
    pub(crate) ring: VecDeque<EventInfo>,
    next_id: u64,
    /// Event id -> hosts (and the versions) whose push it waits for.
    pub(crate) awaiting_push: BTreeMap<u64, BTreeMap<u32, u64>>,
    /// The last error logged and when (Unix ms): a change that keeps failing
    /// (retried every tick) is logged once a second, not every tick.
    last_error: Option<(String, u64)>,
    /// Events recorded since the controller started, by kind (`/metrics`).
    totals: BTreeMap<String, u64>,
}

impl Events {
    /// Appends `e`, stamped `now_ms` unless it carries a time; returns its id.
    pub fn push(&mut self, mut e: EventInfo, now_ms: u64) -> u64 {
        if e.at_ms == 0 {
            e.at_ms = now_ms;
        }
        if e.kind == "error" {
            if let Some((msg, at)) = &self.last_error {
                if *msg == e.reason && e.at_ms.saturating_sub(*at) < 1000 {
                    return self.next_id;
                }
            }
            self.last_error = Some((e.reason.clone(), e.at_ms));
        }
        self.next_id += 1;
        e.id = self.next_id;
        *self.totals.entry(e.kind.clone()).or_default() += 1;
        // Events are the controller's own record of what happened (also in
        // its API); the log gets each one with its context as fields.
        if e.kind == "error" {
            tracing::error!(
                kind = %e.kind,
                tenant = e.tenant.as_deref(),
                chain = e.chain.as_deref(),
                middlebox = e.middlebox.as_deref(),
                instance = e.instance.as_deref(),
                host = e.host,
                "{}",
                e.reason
            );
        } else {
            tracing::info!(
                kind = %e.kind,
                tenant = e.tenant.as_deref(),
                chain = e.chain.as_deref(),
                middlebox = e.middlebox.as_deref(),
                instance = e.instance.as_deref(),
                host = e.host,
                "{}",
                e.reason
            );
        }
        self.ring.push_back(e);
        while self.ring.len() > EVENTS_KEPT {
            if let Some(old) = self.ring.pop_front() {
                self.awaiting_push.remove(&old.id);
            }
        }
        self.next_id
    }

    /// Events recorded since the controller started, by kind.
    pub fn totals(&self) -> &BTreeMap<String, u64> {
        &self.totals
    }

    /// Notes that `host` was sent version `version` at `now_ms`: events waiting
    /// for it get their push time once every host they wait for was sent.
    pub fn pushed(&mut self, host: u32, version: u64, now_ms: u64) {
        let mut done = Vec::new();
        for (id, hosts) in self.awaiting_push.iter_mut() {
            if hosts.get(&host).is_some_and(|v| version >= *v) {
                hosts.remove(&host);
            }
            if hosts.is_empty() {
                done.push(*id);
            }
        }
        for id in done {
            self.awaiting_push.remove(&id);
            if let Some(e) = self.ring.iter_mut().rev().find(|e| e.id == id) {
                e.push_sent_ms = Some(now_ms);
            }
        }
    }

    /// Events after id `since`, of `kind` if given, oldest first.
    pub fn since<'a>(
        &'a self,
        since: u64,
        kind: Option<&'a str>,
    ) -> impl Iterator<Item = &'a EventInfo> {
        self.ring
            .iter()
            .filter(move |e| e.id > since && kind.is_none_or(|k| k == e.kind))
    }
}

/// A new event of `kind` saying `reason`; the other fields are filled by the caller.
pub fn event(kind: &str, reason: String) -> EventInfo {
    EventInfo {
        id: 0,
        at_ms: 0,
        kind: kind.into(),
        tenant: None,
        chain: None,
        middlebox: None,
        instance: None,
        host: None,
        reason,
        first_report_ms: None,
        push_sent_ms: None,
        counts: None,
    }
}

/// An event about one instance (`tenant/middlebox/k`).
pub fn instance_event(kind: &str, key: &crate::desired::InstanceKey, reason: String) -> EventInfo {
    let mut e = event(kind, reason);
    e.tenant = Some(key.0.clone());
    e.middlebox = Some(key.1.clone());
    e.instance = Some(crate::desired::instance_name(&key.0, &key.1, key.2));
    e
}
