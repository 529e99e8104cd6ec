//! A blocking client of the controller's REST API (ureq), for the CLI, the
//! testbed and tests.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use sluice_proto::{AgentConfig, HostHeartbeat, HostRegistration, VmRegistration};

use crate::model::*;

/// A request that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The controller answered with an error (its problem's `detail`, or an
    /// older controller's `error`).
    #[error("{message}")]
    Api {
        /// HTTP status.
        status: u16,
        /// The controller's message, naming the field or object at fault.
        message: String,
    },
    /// The controller could not be reached, or answered something unreadable.
    #[error("{0}")]
    Transport(String),
}

/// The most pages [`Client::get_raw`] reads of one list.
const MAX_PAGES: usize = 100_000;

/// A request's overall timeout unless [`Client::with_timeout`] says otherwise.
const TIMEOUT: Duration = Duration::from_secs(30);

/// The agent every client starts from (its timeouts).
fn agent_builder() -> ureq::AgentBuilder {
    ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_secs(2))
        .timeout(TIMEOUT)
}

/// A change request's conditions, as the client sends them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChangeOptions {
    /// Refuse the change unless the tenant is at this generation (0: absent).
    pub if_generation: Option<u64>,
    /// Only say what the change would do.
    pub dry_run: bool,
    /// Allow removing every chain or NF instance of the tenant.
    pub force: bool,
}

impl ChangeOptions {
    fn query(&self) -> String {
        let mut q = Vec::new();
        if self.dry_run {
            q.push("dry_run=true");
        }
        if self.force {
            q.push("force=true");
        }
        if q.is_empty() {
            String::new()
        } else {
            format!("?{}", q.join("&"))
        }
    }
}

/// How long a client of several (replicated) controllers waits for one of
/// them to accept connections: a leader's death leaves none listening until
/// the next one is elected (the leader's lease, 3 s by default).
const FAILOVER_WAIT: Duration = Duration::from_secs(15);

/// The controller at a base URL (`http://127.0.0.1:7420`), or the replicated
/// controllers at several (comma-separated), with the API token every
/// request carries.
///
/// Of replicated controllers only the leader listens. A request goes to the
/// one that answered last; one that refuses the connection (never having
/// seen the request) is passed over for the next, and while none accepts
/// (an election) the client tries again for up to 15 s.
#[derive(Clone)]
pub struct Client {
    bases: std::sync::Arc<Vec<String>>,
    /// The base that answered last.
    current: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    agent: ureq::Agent,
    token: Option<String>,
    /// The TLS settings of `agent` (a CA file given), for the agent of
    /// event streams, which has no overall timeout.
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    /// A request's overall timeout.
    timeout: Duration,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret: a client may end up in a log line.
        f.debug_struct("Client")
            .field("bases", &self.bases)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Client {
    /// A client of the controller at `base` (of the replicated controllers
    /// at each of its comma-separated URLs).
    pub fn new(base: &str) -> Client {
        let bases: Vec<String> = base
            .split(',')
            .map(|b| b.trim().trim_end_matches('/').to_string())
            .filter(|b| !b.is_empty())
            .collect();
        Client {
            bases: std::sync::Arc::new(if bases.is_empty() {
                vec![String::new()]
            } else {
                bases
            }),
            current: Default::default(),
            agent: agent_builder().build(),
            token: None,
            tls: None,
            timeout: TIMEOUT,
        }
    }

    /// This client giving up on a request after `timeout` (30 s by
    /// default), as the agent's heartbeats do after 500 ms.
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self.agent = self.new_agent();
        self
    }

    /// A ureq agent with this client's timeout and TLS settings.
    fn new_agent(&self) -> ureq::Agent {
        let mut b = agent_builder().timeout(self.timeout);
        if let Some(tls) = &self.tls {
            b = b.tls_config(tls.clone());
        }
        b.build()
    }

    /// This client sending `token` (`Authorization: Bearer TOKEN`) with every
    /// request; surrounding whitespace (a file's newline) is dropped.
    pub fn with_token(mut self, token: Option<&str>) -> Client {
        self.token = token
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty());
        self
    }

    /// This client trusting only the CA certificate(s) in the PEM file `ca`
    /// for an `https://` controller (the controller's own CA, `DB.ca.pem`).
    pub fn with_ca_file(mut self, ca: &std::path::Path) -> Result<Client, ClientError> {
        let mut roots = rustls::RootCertStore::empty();
        let certs = crate::tls::read_certs(ca)
            .map_err(|e| ClientError::Transport(format!("CA file {e}")))?;
        for c in certs {
            roots
                .add(c)
                .map_err(|e| ClientError::Transport(format!("CA file {}: {e}", ca.display())))?;
        }
        let config = rustls::ClientConfig::builder_with_provider(crate::tls::provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| ClientError::Transport(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let config = std::sync::Arc::new(config);
        self.tls = Some(config);
        self.agent = self.new_agent();
        Ok(self)
    }

    /// This client with connections of its own: same controller(s), token
    /// and TLS settings, none of the kept-alive connections of the clients
    /// it was cloned from (clones share them).
    pub fn reconnected(&self) -> Client {
        Client {
            agent: self.new_agent(),
            ..self.clone()
        }
    }

    /// [`Client::with_ca_file`] if a file is given.
    pub fn with_ca(self, ca: Option<&std::path::Path>) -> Result<Client, ClientError> {
        match ca {
            Some(ca) => self.with_ca_file(ca),
            None => Ok(self),
        }
    }

    /// The base URL (of several: the one that answered last).
    pub fn base(&self) -> &str {
        let i = self.current.load(std::sync::atomic::Ordering::Relaxed);
        &self.bases[i % self.bases.len()]
    }

    /// The token it sends, if any.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, String)>,
    ) -> Result<String, ClientError> {
        self.call_if(method, path, body, None)
    }

    /// [`Client::call`] with an `If-Match` generation, if given.
    fn call_if(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, String)>,
        if_match: Option<u64>,
    ) -> Result<String, ClientError> {
        self.call_linked(method, path, body, if_match)
            .map(|(text, _)| text)
    }

    /// [`Client::call_if`], with the answer's `rel="next"` link, if any.
    fn call_linked(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, String)>,
        if_match: Option<u64>,
    ) -> Result<(String, Option<String>), ClientError> {
        let (url, r) = self.send(method, path, body, if_match)?;
        match r {
            Ok(resp) => {
                let next = resp
                    .all("Link")
                    .into_iter()
                    .find_map(crate::resources::page::next_link)
                    .map(String::from);
                let text = resp
                    .into_string()
                    .map_err(|e| ClientError::Transport(format!("{method} {url}: {e}")))?;
                Ok((text, next))
            }
            Err(ureq::Error::Status(status, resp)) => {
                let text = resp.into_string().unwrap_or_default();
                Err(ClientError::Api {
                    status,
                    message: error_message(status, &text),
                })
            }
            Err(e) => Err(self.transport(&e)),
        }
    }

    /// Sends a request to the current controller, moving on to the next
    /// while one refuses the connection; the URL used and ureq's answer.
    fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, String)>,
        if_match: Option<u64>,
    ) -> Result<(String, Result<ureq::Response, ureq::Error>), ClientError> {
        use std::sync::atomic::Ordering;
        let n = self.bases.len();
        let deadline = std::time::Instant::now() + FAILOVER_WAIT;
        loop {
            let first = self.current.load(Ordering::Relaxed);
            for i in 0..n {
                let idx = (first + i) % n;
                let url = format!("{}{path}", self.bases[idx]);
                let mut req = self.agent.request(method, &url);
                if let Some(g) = if_match {
                    req = req.set("If-Match", &format!("\"{g}\""));
                }
                if let Some(t) = &self.token {
                    req = req.set("Authorization", &format!("Bearer {t}"));
                }
                let r = match &body {
                    Some((ct, b)) => req.set("Content-Type", ct).send_string(b),
                    None => req.call(),
                };
                // Refused: a standby, which never saw the request. A read
                // may also go elsewhere when its connection broke (a leader
                // stepping down closes its connections).
                let refused = match &r {
                    Err(ureq::Error::Transport(t)) => {
                        t.kind() == ureq::ErrorKind::ConnectionFailed
                            || (method == "GET" && t.kind() == ureq::ErrorKind::Io)
                    }
                    _ => false,
                };
                if !refused || (n == 1) || (i + 1 == n && std::time::Instant::now() >= deadline) {
                    self.current.store(idx, Ordering::Relaxed);
                    return Ok((url, r));
                }
            }
            // None listens: an election is under way.
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A transport failure's message, with the fix for the usual TLS mistakes.
    fn transport(&self, e: &ureq::Error) -> ClientError {
        let text = e.to_string();
        let hint = if text.contains("UnknownIssuer") || text.contains("invalid peer certificate") {
            ": the controller's certificate is not trusted: give its CA file (--ca-file, \
             SLUICE_CA_FILE, or ca_file in the context; the controller writes DB.ca.pem)"
        } else if self.base().starts_with("http://")
            && (text.contains("Connection reset") || text.contains("Bad Header"))
        {
            ": if the controller serves TLS, use an https:// URL"
        } else {
            ""
        };
        ClientError::Transport(format!(
            "cannot reach the controller at {}: {text}{hint}",
            self.bases.join(",")
        ))
    }

    fn parse<T: DeserializeOwned>(text: &str) -> Result<T, ClientError> {
        serde_json::from_str(text)
            .map_err(|e| ClientError::Transport(format!("unexpected answer: {e}: {text}")))
    }

    fn send_json<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, ClientError> {
        let b = serde_json::to_string(body).map_err(|e| ClientError::Transport(e.to_string()))?;
        Self::parse(&self.call(method, path, Some(("application/json", b)))?)
    }

    /// `GET path`, the raw JSON (or text) answer. A list answered in pages
    /// (`Link: <...>; rel="next"`) is read to its end and returned whole, as
    /// one JSON array.
    pub fn get_raw(&self, path: &str) -> Result<String, ClientError> {
        let (text, mut next) = self.call_linked("GET", path, None, None)?;
        if next.is_none() {
            return Ok(text);
        }
        let mut all: Vec<serde_json::Value> = Self::parse(&text)?;
        // Bounded: a server whose links went round in circles must not keep
        // the client forever.
        let mut pages = 1;
        while let Some(link) = next.take() {
            pages += 1;
            if pages > MAX_PAGES {
                return Err(ClientError::Transport(format!(
                    "GET {path}: more than {pages} pages; the server's next links do not end"
                )));
            }
            let (text, n) = self.call_linked("GET", &self.link_path(&link), None, None)?;
            let page: Vec<serde_json::Value> = Self::parse(&text)?;
            all.extend(page);
            next = n;
        }
        serde_json::to_string(&all).map_err(|e| ClientError::Transport(e.to_string()))
    }

    /// A link's target as a path on this client's base: a path as it is, an
    /// absolute URL on the base without it.
    fn link_path(&self, link: &str) -> String {
        match link.strip_prefix(self.base()) {
            Some(p) => p.to_string(),
            None => link.to_string(),
        }
    }

    /// `GET path`, parsed.
    pub fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        Self::parse(&self.get_raw(path)?)
    }

    /// Applies a tenant spec (`PUT /v1/tenants/{name}` if `name` is given, else
    /// `POST /v1/tenants`); returns the raw JSON summary.
    pub fn apply_raw(&self, name: Option<&str>, yaml: &str) -> Result<String, ClientError> {
        let body = Some(("application/yaml", yaml.to_string()));
        match name {
            Some(n) => self.call("PUT", &format!("/v1/tenants/{n}"), body),
            None => self.call("POST", "/v1/tenants", body),
        }
    }

    /// Applies a tenant spec (`PUT /v1/tenants/{name}`, or `POST /v1/tenants`
    /// without a name) under `opts`; returns
    /// the raw JSON summary (with the change plan).
    pub fn apply_with(
        &self,
        name: Option<&str>,
        yaml: &str,
        opts: &ChangeOptions,
    ) -> Result<String, ClientError> {
        let body = Some(("application/yaml", yaml.to_string()));
        match name {
            Some(n) => {
                let path = format!("/v1/tenants/{n}{}", opts.query());
                self.call_if("PUT", &path, body, opts.if_generation)
            }
            None => {
                let path = format!("/v1/tenants{}", opts.query());
                self.call_if("POST", &path, body, opts.if_generation)
            }
        }
    }

    /// Deletes a tenant under `opts`; returns the raw JSON answer.
    pub fn delete_tenant_with(
        &self,
        name: &str,
        opts: &ChangeOptions,
    ) -> Result<String, ClientError> {
        let path = format!("/v1/tenants/{name}{}", opts.query());
        self.call_if("DELETE", &path, None, opts.if_generation)
    }

    /// The audit log (`GET /v1/audit`): entries after `since`, of `tenant`,
    /// the newest `limit` (0: the server's default).
    pub fn audit(
        &self,
        since: u64,
        tenant: Option<&str>,
        limit: usize,
    ) -> Result<Vec<crate::audit::AuditEntry>, ClientError> {
        let mut q = format!("/v1/audit?since={since}");
        if let Some(t) = tenant {
            q.push_str(&format!("&tenant={}", crate::resources::percent_encode(t)));
        }
        if limit > 0 {
            q.push_str(&format!("&limit={limit}"));
        }
        self.get(&q)
    }

    /// Deployed instances' EVE events (`kind` `alerts` or `flows`), oldest
    /// first: of `tenant`, later than `since`, the newest `limit` (0: the
    /// server's default).
    pub fn eve(
        &self,
        kind: &str,
        tenant: Option<&str>,
        since: Option<&str>,
        limit: usize,
    ) -> Result<Vec<serde_json::Value>, ClientError> {
        let mut q = vec![];
        if let Some(t) = tenant {
            q.push(format!("tenant={}", crate::resources::percent_encode(t)));
        }
        if let Some(s) = since {
            q.push(format!("since={}", crate::resources::percent_encode(s)));
        }
        if limit > 0 {
            q.push(format!("limit={limit}"));
        }
        self.get(&format!("/v1/{kind}?{}", q.join("&")))
    }

    /// Follows deployed instances' EVE events (`kind` `alerts` or `flows`)
    /// as the controller's event stream sends them (`?follow=true`, a
    /// `text/event-stream`): those [`Client::eve`] would list, then every new
    /// one, each handed to `on_event` until it returns false. Returns when
    /// `on_event` does, or when the stream ends (the controller stopped: the
    /// caller reconnects with `since` the last event's timestamp).
    pub fn eve_follow(
        &self,
        kind: &str,
        tenant: Option<&str>,
        since: Option<&str>,
        limit: usize,
        mut on_event: impl FnMut(serde_json::Value) -> bool,
    ) -> Result<(), ClientError> {
        use std::io::BufRead;
        let mut q = vec!["follow=true".to_string()];
        if let Some(t) = tenant {
            q.push(format!("tenant={}", crate::resources::percent_encode(t)));
        }
        if let Some(s) = since {
            q.push(format!("since={}", crate::resources::percent_encode(s)));
        }
        if limit > 0 {
            q.push(format!("limit={limit}"));
        }
        let url = format!("{}/v1/{kind}?{}", self.base(), q.join("&"));
        // No overall timeout: the stream lasts. The server sends at least a
        // comment every 15 s, so a read waiting much longer means it is gone.
        let mut b = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(2))
            .timeout_read(Duration::from_secs(45));
        if let Some(c) = &self.tls {
            b = b.tls_config(c.clone());
        }
        let mut req = b.build().get(&url).set("Accept", "text/event-stream");
        if let Some(t) = &self.token {
            req = req.set("Authorization", &format!("Bearer {t}"));
        }
        let resp = match req.call() {
            Ok(r) => r,
            Err(ureq::Error::Status(status, resp)) => {
                let text = resp.into_string().unwrap_or_default();
                return Err(ClientError::Api {
                    status,
                    message: error_message(status, &text),
                });
            }
            Err(e) => return Err(self.transport(&e)),
        };
        let mut data = String::new();
        for line in std::io::BufReader::new(resp.into_reader()).lines() {
            let Ok(line) = line else {
                // Cut off: the caller reconnects.
                return Ok(());
            };
            if let Some(d) = line.strip_prefix("data:") {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(d.strip_prefix(' ').unwrap_or(d));
            } else if line.is_empty() && !data.is_empty() {
                let event = serde_json::from_str(&data).map_err(|e| {
                    ClientError::Transport(format!("{url}: an event that is not JSON: {e}: {data}"))
                })?;
                data.clear();
                if !on_event(event) {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Applies a tenant spec.
    pub fn apply(&self, name: Option<&str>, yaml: &str) -> Result<ApplySummary, ClientError> {
        Self::parse(&self.apply_raw(name, yaml)?)
    }

    /// Deletes a tenant; returns the raw JSON answer.
    pub fn delete_tenant_raw(&self, name: &str) -> Result<String, ClientError> {
        self.call("DELETE", &format!("/v1/tenants/{name}"), None)
    }

    /// Deletes a tenant.
    pub fn delete_tenant(&self, name: &str) -> Result<Deleted, ClientError> {
        Self::parse(&self.delete_tenant_raw(name)?)
    }

    /// `GET /v1/containment`: hosts accused of ignoring congestion feedback,
    /// and contained ones.
    pub fn containment(&self) -> Result<crate::reconcile::ContainmentInfo, ClientError> {
        Self::parse(&self.call("GET", "/v1/containment", None)?)
    }

    /// `DELETE /v1/hosts/{id}/containment`: releases a contained host;
    /// whether it was contained.
    pub fn release_host(&self, id: u32) -> Result<bool, ClientError> {
        let v: serde_json::Value =
            Self::parse(&self.call("DELETE", &format!("/v1/hosts/{id}/containment"), None)?)?;
        Ok(v.get("released").and_then(serde_json::Value::as_bool) == Some(true))
    }

    /// `POST /v1/hosts/{id}/revoke`: revokes a host's certificates and
    /// tokens and contains it; the answer (`host`, `revoked`, `contained`,
    /// `tokens_deleted`).
    pub fn revoke_host(&self, id: u32) -> Result<serde_json::Value, ClientError> {
        Self::parse(&self.call(
            "POST",
            &format!("/v1/hosts/{id}/revoke"),
            Some(("application/json", "{}".to_string())),
        )?)
    }

    /// The fabric's key ids and a rotation's progress (`GET /v1/fabric`).
    pub fn fabric(&self) -> Result<serde_json::Value, ClientError> {
        Self::parse(&self.get_raw("/v1/fabric")?)
    }

    /// Every rack uplink's traffic, measured and predicted (`GET
    /// /v1/fabric/uplinks`).
    pub fn uplinks(&self) -> Result<Vec<crate::model::RackUplink>, ClientError> {
        Self::parse(&self.get_raw("/v1/fabric/uplinks")?)
    }

    /// Starts a rotation of the fabric's keys (`POST /v1/fabric/rotate`).
    pub fn rotate_fabric(&self) -> Result<serde_json::Value, ClientError> {
        Self::parse(&self.call(
            "POST",
            "/v1/fabric/rotate",
            Some(("application/json", "{}".to_string())),
        )?)
    }

    /// Registers a host or heartbeats.
    pub fn register_host(&self, reg: &HostRegistration) -> Result<HostAck, ClientError> {
        self.send_json("POST", "/v1/hosts", reg)
    }

    /// Registers a VM.
    pub fn register_vm(&self, reg: &VmRegistration) -> Result<VmInfo, ClientError> {
        self.send_json("PUT", &format!("/v1/vms/{}/{}", reg.tenant, reg.name), reg)
    }

    /// Unregisters a VM.
    pub fn delete_vm(&self, tenant: &str, name: &str) -> Result<Deleted, ClientError> {
        Self::parse(&self.call("DELETE", &format!("/v1/vms/{tenant}/{name}"), None)?)
    }

    /// Applied tenants.
    pub fn tenants(&self) -> Result<Vec<TenantSummary>, ClientError> {
        self.get("/v1/tenants")
    }

    /// One tenant.
    pub fn tenant(&self, name: &str) -> Result<TenantDetail, ClientError> {
        self.get(&format!("/v1/tenants/{name}"))
    }

    /// Registered hosts.
    pub fn hosts(&self) -> Result<Vec<HostInfo>, ClientError> {
        self.get("/v1/hosts")
    }

    /// Registered VMs.
    pub fn vms(&self) -> Result<Vec<VmInfo>, ClientError> {
        self.get("/v1/vms")
    }

    /// `GET /v1/status`: the controller's view of the state store.
    pub fn status(&self) -> Result<crate::model::StatusInfo, ClientError> {
        self.get("/v1/status")
    }

    /// NF instances with what their agents report.
    pub fn instances(&self) -> Result<Vec<InstanceInfo>, ClientError> {
        self.get("/v1/instances")
    }

    /// `GET /v1/placement` (of one tenant with `Some`): where each instance
    /// runs and why.
    pub fn placement(&self, tenant: Option<&str>) -> Result<Vec<PlacementInfo>, ClientError> {
        match tenant {
            Some(t) => self.get(&format!(
                "/v1/placement?tenant={}",
                crate::resources::percent_encode(t)
            )),
            None => self.get("/v1/placement"),
        }
    }

    /// Chains of every tenant.
    pub fn chains(&self) -> Result<Vec<ChainInfo>, ClientError> {
        self.get("/v1/chains")
    }

    /// A host's FIB entries.
    pub fn fib(&self, host: u32) -> Result<HostFibInfo, ClientError> {
        self.get(&format!("/v1/hosts/{host}/fib"))
    }

    /// A host's whole configuration.
    pub fn config(&self, host: u32) -> Result<AgentConfig, ClientError> {
        self.get(&format!("/v1/hosts/{host}/config"))
    }

    /// Heartbeats with instance health.
    pub fn heartbeat(&self, hb: &HostHeartbeat) -> Result<HostAck, ClientError> {
        self.send_json("POST", "/v1/hosts", hb)
    }

    /// A middlebox's instances.
    pub fn middlebox(&self, tenant: &str, mb: &str) -> Result<MiddleboxInfo, ClientError> {
        self.get(&format!("/v1/tenants/{tenant}/middleboxes/{mb}"))
    }

    /// Sets a middlebox's instance count.
    pub fn scale(
        &self,
        tenant: &str,
        mb: &str,
        req: &ScaleRequest,
    ) -> Result<MiddleboxInfo, ClientError> {
        self.send_json(
            "PUT",
            &format!("/v1/tenants/{tenant}/middleboxes/{mb}"),
            req,
        )
    }

    /// Reports an application metric sample of a chain.
    pub fn metric(
        &self,
        tenant: &str,
        chain: &str,
        m: &MetricSample,
    ) -> Result<ScalingAck, ClientError> {
        self.send_json(
            "POST",
            &format!("/v1/tenants/{tenant}/chains/{chain}/metrics"),
            m,
        )
    }

    /// Enables (or reconfigures) a chain's scaler.
    pub fn set_scaling(
        &self,
        tenant: &str,
        chain: &str,
        cfg: &ScalingConfig,
    ) -> Result<ScalingInfo, ClientError> {
        self.send_json(
            "PUT",
            &format!("/v1/tenants/{tenant}/chains/{chain}/scaling"),
            cfg,
        )
    }

    /// A chain's scaler.
    pub fn scaling(&self, tenant: &str, chain: &str) -> Result<ScalingInfo, ClientError> {
        self.get(&format!("/v1/tenants/{tenant}/chains/{chain}/scaling"))
    }

    /// Asks a chain's scaler for a pass now.
    pub fn scaling_request(
        &self,
        tenant: &str,
        chain: &str,
        req: &ScalingRequest,
    ) -> Result<ScalingAck, ClientError> {
        self.send_json(
            "POST",
            &format!("/v1/tenants/{tenant}/chains/{chain}/scaling/request"),
            req,
        )
    }

    /// Blocks traffic from `req.from` to the tenant's VM `req.vm` (a block
    /// that exists already is answered as it is).
    pub fn block(
        &self,
        tenant: &str,
        req: &crate::blocks::BlockRequest,
    ) -> Result<crate::blocks::BlockInfo, ClientError> {
        self.send_json("POST", &format!("/v1/tenants/{tenant}/blocks"), req)
    }

    /// The tenant's blocks.
    pub fn blocks(&self, tenant: &str) -> Result<Vec<crate::blocks::BlockInfo>, ClientError> {
        self.get(&format!("/v1/tenants/{tenant}/blocks"))
    }

    /// Removes the tenant's block `id`.
    pub fn unblock(&self, tenant: &str, id: u64) -> Result<crate::blocks::BlockInfo, ClientError> {
        Self::parse(&self.call("DELETE", &format!("/v1/tenants/{tenant}/blocks/{id}"), None)?)
    }

    /// Every load-balancer backend's health (a tenant token: its own).
    pub fn backends(&self) -> Result<Vec<BackendInfo>, ClientError> {
        self.get("/v1/backends")
    }

    /// Drains host `id` for maintenance (`force`: move `state: local`
    /// instances too); what moved and what stayed.
    pub fn drain_host(
        &self,
        id: u32,
        force: bool,
    ) -> Result<crate::model::HostDrainInfo, ClientError> {
        self.send_json(
            "PUT",
            &format!("/v1/hosts/{id}/drain"),
            &serde_json::json!({ "force": force }),
        )
    }

    /// Ends the drain of host `id`; whether it was drained.
    pub fn undrain_host(&self, id: u32) -> Result<bool, ClientError> {
        let v: serde_json::Value =
            Self::parse(&self.call("DELETE", &format!("/v1/hosts/{id}/drain"), None)?)?;
        Ok(v.get("undrained").and_then(serde_json::Value::as_bool) == Some(true))
    }

    /// Drains backend `addr` of load balancer `tenant/mb` with a
    /// deregistration delay of `delay_ms` (`None`: the controller's default);
    /// the backends it named, after.
    pub fn drain_backend(
        &self,
        tenant: &str,
        mb: &str,
        addr: &str,
        delay_ms: Option<u64>,
    ) -> Result<Vec<BackendInfo>, ClientError> {
        self.send_json(
            "PUT",
            &Self::drain_path(tenant, mb, addr),
            &DrainRequest { delay_ms },
        )
    }

    /// Ends the drain of backend `addr` of load balancer `tenant/mb`.
    pub fn undrain_backend(
        &self,
        tenant: &str,
        mb: &str,
        addr: &str,
    ) -> Result<Vec<BackendInfo>, ClientError> {
        Self::parse(&self.call("DELETE", &Self::drain_path(tenant, mb, addr), None)?)
    }

    /// Drains instance `index` of middlebox `tenant/mb` for at most
    /// `delay_ms` (`None`: the controller's default); `force` drains even
    /// the last instance taking new flows.
    pub fn drain_instance(
        &self,
        tenant: &str,
        mb: &str,
        index: u32,
        delay_ms: Option<u64>,
        force: bool,
    ) -> Result<crate::model::InstanceDrainInfo, ClientError> {
        self.send_json(
            "PUT",
            &Self::instance_drain_path(tenant, mb, index),
            &crate::model::InstanceDrainRequest { delay_ms, force },
        )
    }

    /// Ends the drain of instance `index` of middlebox `tenant/mb`.
    pub fn undrain_instance(
        &self,
        tenant: &str,
        mb: &str,
        index: u32,
    ) -> Result<crate::model::InstanceDrainInfo, ClientError> {
        Self::parse(&self.call(
            "DELETE",
            &Self::instance_drain_path(tenant, mb, index),
            None,
        )?)
    }

    fn instance_drain_path(tenant: &str, mb: &str, index: u32) -> String {
        let e = crate::resources::percent_encode;
        format!(
            "/v1/tenants/{}/middleboxes/{}/instances/{index}/drain",
            e(tenant),
            e(mb)
        )
    }

    fn drain_path(tenant: &str, mb: &str, addr: &str) -> String {
        let e = crate::resources::percent_encode;
        format!(
            "/v1/tenants/{}/middleboxes/{}/backends/{}/drain",
            e(tenant),
            e(mb),
            e(addr)
        )
    }

    /// Events with an id above `since` (0: all kept).
    pub fn events(&self, since: u64) -> Result<Vec<EventInfo>, ClientError> {
        self.get(&format!("/v1/events?since={since}"))
    }

    /// API tokens (operator only).
    pub fn tokens(&self) -> Result<Vec<TokenInfo>, ClientError> {
        self.get("/v1/tokens")
    }

    /// Creates a token; the answer holds its secret, shown this once.
    pub fn create_token(&self, name: &str, role: &str) -> Result<TokenCreated, ClientError> {
        self.send_json(
            "POST",
            "/v1/tokens",
            &TokenRequest {
                name: name.to_string(),
                role: role.to_string(),
            },
        )
    }

    /// Deletes a token.
    pub fn delete_token(&self, name: &str) -> Result<TokenInfo, ClientError> {
        Self::parse(&self.call("DELETE", &format!("/v1/tokens/{name}"), None)?)
    }
}

/// What an error answer says: its problem's `detail` (RFC 9457), an older
/// controller's `error`, or the status and text of anything else.
pub fn error_message(status: u16, text: &str) -> String {
    serde_json::from_str::<Problem>(text)
        .ok()
        .and_then(|p| p.message().map(String::from))
        .unwrap_or_else(|| format!("HTTP {status}: {text}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_come_from_the_detail_or_the_old_error_member() {
        let problem = r#"{"type": "https://sluice.dev/problems/conflict", "title": "Conflict",
            "status": 409, "detail": "tenant `t` is at generation 3, not 2", "error": "old"}"#;
        assert_eq!(
            error_message(409, problem),
            "tenant `t` is at generation 3, not 2"
        );
        assert_eq!(
            error_message(400, r#"{"error": "spec: tenant: missing"}"#),
            "spec: tenant: missing"
        );
        assert_eq!(error_message(502, "Bad Gateway"), "HTTP 502: Bad Gateway");
    }
}
