//! Calls to the agents' APIs. An agent that registered an `https://` URL is
//! reached over TLS trusting the hosts' CA only, and only if its certificate
//! names the host meant, presenting the controller's client certificate
//! ([`sluice_tls::hosts::mutual_client_config`]); plain `http://` agents
//! (allowed unless `require_agent_tls`) as before.

use std::time::Duration;

use crate::service::Shared;

/// A client for host `host`'s agent at `api`, with the given timeouts.
pub(crate) fn agent(
    shared: &Shared,
    host: u32,
    api: &str,
    connect: Duration,
    timeout: Duration,
) -> Result<ureq::Agent, String> {
    let b = ureq::AgentBuilder::new()
        .timeout_connect(connect)
        .timeout(timeout);
    if !api.starts_with("https://") {
        return Ok(b.build());
    }
    let ca = shared.hosts_ca.as_ref().ok_or_else(|| {
        format!("agent API {api} speaks TLS, but this controller has no hosts' CA (tls is off)")
    })?;
    let me = shared
        .controller_cert
        .get(ca, std::time::SystemTime::now())
        .map_err(|e| e.to_string())?;
    let config = sluice_tls::hosts::mutual_client_config(ca.pem(), host, Some(me))
        .map_err(|e| e.to_string())?;
    Ok(b.tls_config(config).build())
}
