//! Calls to the agents' APIs. An agent that registered an `https://` URL is
//! reached over TLS trusting the hosts' CA only, and only if its certificate
//! names the host meant, presenting the controller's client certificate
//! ([`sluice_tls::hosts::mutual_client_config`]); plain `http://` agents
//! (allowed unless `require_agent_tls`) as before.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::service::Shared;

/// What a cached client was made for: host, API URL, timeouts (ms), and the
/// controller's client certificate (by address: a renewed one is another).
type ClientKey = (u32, String, u64, u64, usize);

/// Clients of the agents, kept between calls: a ureq agent keeps its
/// connections open, so a push or status poll reuses the mutually
/// authenticated connection instead of a new TCP and TLS handshake (about
/// 0.34 ms with a client certificate on this machine; `handshake_cost`).
#[derive(Default)]
pub(crate) struct Clients(Mutex<HashMap<ClientKey, ureq::Agent>>);

/// A client for host `host`'s agent at `api`, with the given timeouts.
pub(crate) fn agent(
    shared: &Shared,
    host: u32,
    api: &str,
    connect: Duration,
    timeout: Duration,
) -> Result<ureq::Agent, String> {
    let me = if api.starts_with("https://") {
        let ca = shared.hosts_ca.as_ref().ok_or_else(|| {
            format!("agent API {api} speaks TLS, but this controller has no hosts' CA (tls is off)")
        })?;
        let me = shared
            .controller_cert
            .get(ca, std::time::SystemTime::now())
            .map_err(|e| e.to_string())?;
        Some((ca, me))
    } else {
        None
    };
    let key: ClientKey = (
        host,
        api.to_string(),
        connect.as_millis() as u64,
        timeout.as_millis() as u64,
        me.as_ref().map_or(0, |(_, c)| Arc::as_ptr(c) as usize),
    );
    let mut cache = shared
        .agent_clients
        .0
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(a) = cache.get(&key) {
        return Ok(a.clone());
    }
    let b = ureq::AgentBuilder::new()
        .timeout_connect(connect)
        .timeout(timeout)
        .max_idle_connections_per_host(2);
    let client = match me {
        None => b.build(),
        Some((ca, me)) => {
            let config = sluice_tls::hosts::mutual_client_config(ca.pem(), host, Some(me))
                .map_err(|e| e.to_string())?;
            b.tls_config(config).build()
        }
    };
    // Clients of an older certificate or address of the host go.
    cache.retain(|k, _| k.0 != host || (k.1 == key.1 && k.4 == key.4));
    cache.insert(key, client.clone());
    Ok(client)
}
