//! The pusher: sends each host the configuration the reconciler derived for it,
//! one thread per push and at most one push in flight per host, retrying with
//! the reconciler's backoff; and the polls asking agents for their pinned flows.
//! API calls never wait for agents.
//!
//! A push is a delta (`PATCH /v1/config`, [`sluice_proto::ConfigDelta`])
//! against the configuration the host's agent last acknowledged ([`Acked`]),
//! or the whole configuration (`PUT /v1/config`) when there is none (first
//! contact, a restarted agent or controller), when the delta would not be
//! smaller, and at once when the agent refuses the delta (409: it runs another
//! version; 404/405: an agent from before deltas; 400).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sluice_proto::{AgentConfig, AgentStatus};

use crate::metrics::PushKind;
use crate::service::{lock, Shared};

/// Per host, the configuration its agent last acknowledged (store passwords
/// filled in, as sent) and the agent API token it was sent with: the base of
/// the next delta. One per host, shared (`Arc`) with nothing else alive once
/// the push that sent it ended; forgotten when the host's agent restarts (a
/// new token, or a heartbeat reporting no configuration) or the host goes.
#[derive(Default)]
pub(crate) struct Acked(Mutex<HashMap<u32, AckedConfig>>);

/// A configuration an agent acknowledged, and the agent's token then.
type AckedConfig = (Arc<AgentConfig>, Option<String>);

impl Acked {
    /// The base for a delta to `host`'s agent, reached with `token`, that
    /// brings it to `version`: none if nothing was acknowledged, or by an
    /// agent with another token (restarted), or not an earlier version.
    fn base(&self, host: u32, token: Option<&str>, version: u64) -> Option<Arc<AgentConfig>> {
        let mut m = lock(&self.0);
        let (c, t) = m.get(&host)?;
        if t.as_deref() != token {
            m.remove(&host);
            return None;
        }
        (c.host == host && c.version < version).then(|| c.clone())
    }

    fn acknowledged(&self, host: u32, config: Arc<AgentConfig>, token: Option<String>) {
        lock(&self.0).insert(host, (config, token));
    }

    /// Forgets what `host`'s agent acknowledged: its next push is whole.
    pub(crate) fn forget(&self, host: u32) {
        lock(&self.0).remove(&host);
    }

    /// The version `host`'s agent last acknowledged, if remembered.
    #[cfg(test)]
    pub(crate) fn version(&self, host: u32) -> Option<u64> {
        lock(&self.0).get(&host).map(|(c, _)| c.version)
    }
}

/// Pushes waiting for their time, and hosts with a push in flight.
#[derive(Default)]
pub(crate) struct PushQueue {
    pub(crate) due: BTreeMap<u32, Instant>,
    in_flight: BTreeSet<u32>,
    /// Hosts being polled for their pinned flows.
    polling: BTreeSet<u32>,
}

impl PushQueue {
    /// Queues a push of `host` at `at` (the earlier wins).
    pub(crate) fn schedule(&mut self, host: u32, at: Instant) {
        let e = self.due.entry(host).or_insert(at);
        if at < *e {
            *e = at;
        }
    }
}

/// Keeps `t` so [`crate::ServerHandle::shutdown`] can wait for it.
fn keep(shared: &Shared, t: JoinHandle<()>) {
    let mut p = lock(&shared.threads);
    p.retain(|t| !t.is_finished());
    p.push(t);
}

/// Sends due configurations until the server stops.
pub(crate) fn dispatcher(shared: &Arc<Shared>) {
    let mut q = lock(&shared.queue);
    loop {
        if shared.stopping() {
            return;
        }
        let now = Instant::now();
        let due: Vec<u32> = q
            .due
            .iter()
            .filter(|(h, at)| **at <= now && !q.in_flight.contains(h))
            .map(|(h, _)| *h)
            .collect();
        for h in due {
            q.due.remove(&h);
            q.in_flight.insert(h);
            let sh = shared.clone();
            let t = std::thread::Builder::new()
                .name(format!("ctl-push-{h}"))
                .spawn(move || push_one(&sh, h));
            match t {
                Ok(t) => keep(shared, t),
                Err(_) => {
                    // Try again shortly.
                    q.in_flight.remove(&h);
                    q.due.insert(h, now + Duration::from_millis(200));
                }
            }
        }
        let next = q
            .due
            .iter()
            .filter(|(h, _)| !q.in_flight.contains(h))
            .map(|(_, at)| *at)
            .min();
        let wait = next
            .map(|at| at.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_millis(500))
            .clamp(Duration::from_millis(1), Duration::from_millis(500));
        q = shared
            .push_cv
            .wait_timeout(q, wait)
            .map(|(g, _)| g)
            .unwrap_or_else(|p| p.into_inner().0);
    }
}

fn push_one(shared: &Arc<Shared>, host: u32) {
    let _span = tracing::info_span!("push", host).entered();
    let job = lock(&shared.reconciler).push_started(host, Instant::now());
    if let Some(mut job) = job {
        // A new tenant's instances must find their store user defined.
        shared.sync_store_users();
        if let Some(p) = &shared.passwords {
            p.fill(&mut job.config);
        }
        // The agent answers once its data plane runs the new configuration.
        let client = crate::agent_client::agent(
            shared,
            host,
            &job.api,
            Duration::from_millis(500),
            Duration::from_secs(10),
        );
        // The agent's own token, as its last heartbeat gave it (none: an agent
        // whose API is open).
        let token = lock(&shared.agent_tokens).get(&host).cloned();
        let version = job.config.version;
        let config = Arc::new(job.config);
        let base = shared.acked.base(host, token.as_deref(), version);
        let mut sent = Vec::new();
        let result = client.and_then(|client| {
            send(
                &client,
                &job.api,
                token.as_deref(),
                base.as_deref(),
                &config,
                &mut sent,
            )
        });
        if result.is_ok() {
            shared.acked.acknowledged(host, config, token);
        }
        let mut rec = lock(&shared.reconciler);
        for s in sent {
            rec.push_sent(s.kind, s.bytes, s.accepted);
            if let Some(why) = &s.refused {
                rec.delta_refused(host, why);
            }
        }
        rec.push_finished(host, version, result, Instant::now());
        let effects = rec.take_effects();
        drop(rec);
        lock(&shared.queue).in_flight.remove(&host);
        shared.perform(effects);
    } else {
        // The host is gone (or has no configuration): nothing to base on.
        shared.acked.forget(host);
        lock(&shared.queue).in_flight.remove(&host);
    }
    shared.push_cv.notify_all();
}

/// One body sent to an agent.
struct Sent {
    kind: PushKind,
    bytes: u64,
    accepted: bool,
    /// A delta refused, and the agent's answer.
    refused: Option<String>,
}

/// Sends `config` to the agent at `api`: as a delta against `base` when there
/// is one and the delta is smaller, else (or when the agent refuses the
/// delta) whole. What was sent goes to `sent`.
fn send(
    client: &ureq::Agent,
    api: &str,
    token: Option<&str>,
    base: Option<&AgentConfig>,
    config: &AgentConfig,
    sent: &mut Vec<Sent>,
) -> Result<(), String> {
    let url = format!("{api}/v1/config");
    let call = |method: &str, body: &[u8]| {
        let r = client
            .request(method, &url)
            .set("Content-Type", "application/json");
        match token {
            Some(t) => r.set("Authorization", &format!("Bearer {t}")),
            None => r,
        }
        .send_bytes(body)
        .map(|_| ())
        .map_err(|e| match e {
            ureq::Error::Status(code, resp) => {
                Failure::Status(code, resp.into_string().unwrap_or_default())
            }
            e => Failure::Transport(e.to_string()),
        })
    };
    let full = serde_json::to_vec(config)
        .map_err(|e| format!("encoding version {}: {e}", config.version))?;
    if let Some(base) = base {
        let delta = serde_json::to_vec(&AgentConfig::delta_from(base, config))
            .map_err(|e| format!("encoding a delta to version {}: {e}", config.version))?;
        if delta.len() < full.len() {
            let r = call("PATCH", &delta);
            let mut s = Sent {
                kind: PushKind::Delta,
                bytes: delta.len() as u64,
                accepted: r.is_ok(),
                refused: None,
            };
            match r {
                Ok(()) => {
                    sent.push(s);
                    return Ok(());
                }
                // Another version runs there (the agent restarted with an
                // older saved one, say), an agent from before deltas, or a
                // delta it cannot apply: the whole configuration, at once.
                Err(Failure::Status(code @ (400 | 404 | 405 | 409), text)) => {
                    s.refused = Some(format!("HTTP {code}: {text}"));
                    sent.push(s);
                }
                Err(e) => {
                    sent.push(s);
                    return Err(refusal(config.version, api, e));
                }
            }
        }
    }
    let r = call("PUT", &full);
    sent.push(Sent {
        kind: PushKind::Full,
        bytes: full.len() as u64,
        accepted: r.is_ok(),
        refused: None,
    });
    r.map_err(|e| refusal(config.version, api, e))
}

/// How a call to an agent failed.
enum Failure {
    /// The agent answered this status, with this body.
    Status(u16, String),
    /// It could not be reached (or did not answer).
    Transport(String),
}

/// Why a push of `version` failed.
fn refusal(version: u64, api: &str, e: Failure) -> String {
    match e {
        Failure::Status(code, text) => {
            format!("agent refused version {version}: HTTP {code}: {text}")
        }
        Failure::Transport(e) => format!("cannot reach agent at {api}: {e}"),
    }
}

/// Asks `host`'s agent for its pinned flows (what drains and catch-ups wait
/// for), on a thread of its own, unless a poll of it is under way.
pub(crate) fn poll(shared: &Arc<Shared>, host: u32, api: String) {
    if !lock(&shared.queue).polling.insert(host) {
        return;
    }
    let sh = shared.clone();
    let t = std::thread::Builder::new()
        .name(format!("ctl-poll-{host}"))
        .spawn(move || {
            let st = crate::agent_client::agent(
                &sh,
                host,
                &api,
                Duration::from_millis(200),
                Duration::from_millis(500),
            )
            .ok()
            .and_then(|a| a.get(&format!("{api}/v1/status")).call().ok())
            .and_then(|r| r.into_json::<AgentStatus>().ok());
            if let Some(st) = st {
                lock(&sh.reconciler).pinned_report(
                    host,
                    st.config_version,
                    st.pinned_flows,
                    Instant::now(),
                );
            }
            lock(&sh.queue).polling.remove(&host);
        });
    match t {
        Ok(t) => keep(shared, t),
        Err(_) => {
            lock(&shared.queue).polling.remove(&host);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A delta's base is what the agent acknowledged, only while the same
    /// agent (the same token) runs and only for a later version; another
    /// token means a restarted agent: forgotten, the next push is whole.
    #[test]
    fn a_base_is_the_acknowledged_configuration_of_the_same_agent() {
        let acked = Acked::default();
        let cfg = |version| {
            Arc::new(AgentConfig {
                version,
                host: 3,
                ..AgentConfig::default()
            })
        };
        assert!(
            acked.base(3, Some("t"), 5).is_none(),
            "nothing acknowledged"
        );
        acked.acknowledged(3, cfg(4), Some("t".into()));
        assert_eq!(acked.base(3, Some("t"), 5).map(|c| c.version), Some(4));
        assert!(acked.base(3, Some("t"), 4).is_none(), "not a later version");
        assert!(acked.base(4, Some("t"), 5).is_none(), "another host");
        assert_eq!(acked.version(3), Some(4));
        assert!(acked.base(3, Some("new"), 5).is_none(), "a restarted agent");
        assert_eq!(acked.version(3), None, "forgotten");
        acked.acknowledged(3, cfg(6), None);
        acked.forget(3);
        assert!(acked.base(3, None, 7).is_none());
    }
}
