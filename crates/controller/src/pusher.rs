//! The pusher: sends each host the configuration the reconciler derived for it,
//! one thread per push and at most one push in flight per host, retrying with
//! the reconciler's backoff; and the polls asking agents for their pinned flows.
//! API calls never wait for agents.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sluice_proto::AgentStatus;

use crate::service::{lock, Shared};

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
        let result = client.and_then(|client| {
            let r = client.put(&format!("{}/v1/config", job.api));
            let r = match token {
                Some(t) => r.set("Authorization", &format!("Bearer {t}")),
                None => r,
            }
            .send_json(&job.config);
            match r {
                Ok(_) => Ok(()),
                Err(ureq::Error::Status(code, resp)) => Err(format!(
                    "agent refused version {}: HTTP {code}: {}",
                    job.config.version,
                    resp.into_string().unwrap_or_default()
                )),
                Err(e) => Err(format!("cannot reach agent at {}: {e}", job.api)),
            }
        });
        let mut rec = lock(&shared.reconciler);
        rec.push_finished(host, job.config.version, result, Instant::now());
        let effects = rec.take_effects();
        drop(rec);
        lock(&shared.queue).in_flight.remove(&host);
        shared.perform(effects);
    } else {
        lock(&shared.queue).in_flight.remove(&host);
    }
    shared.push_cv.notify_all();
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
